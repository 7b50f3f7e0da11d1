//! The challenge page for browsers: self-contained, accessible, in the visitor's language.
//!
//! Everything is inline: the style, the script, and the worker's source (in a
//! `<script type="text/plain">`, which the browser does not run; the script turns it into a
//! `blob:` worker). The Content-Security-Policy sent with the page allows exactly those: the
//! script and the style by their SHA-256, workers from `blob:`, the form's post to the site,
//! and nothing else (no network request, no frame, no image, no plugin).
//!
//! What the request controls (the host, the return URL) is escaped for HTML wherever it
//! appears, and reaches the script only through `data-` attributes and form fields, which the
//! script reads as text: the script itself is a constant.

use std::fmt::Write as _;
use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};

use crate::form::{VERIFY_PATH, return_path, wait_url};
use crate::{Difficulty, Lang};

/// The page's script, as sent.
pub const SCRIPT: &str = include_str!("../assets/page.js");
/// The worker's source, as sent (not run by the page: the script makes it a worker).
pub const WORKER: &str = include_str!("../assets/worker.js");
/// The page's style, as sent.
pub const STYLE: &str = include_str!("../assets/page.css");

/// The status a challenge page is sent with: 403, as Cloudflare's managed challenge and "I'm
/// Under Attack" pages are.
pub const STATUS: u16 = 403;

static CSP: LazyLock<String> = LazyLock::new(|| {
    let hash = |text: &str| STANDARD.encode(Sha256::digest(text.as_bytes()));
    format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; worker-src blob:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        hash(SCRIPT),
        hash(STYLE)
    )
});

/// The `Content-Security-Policy` header value sent with every challenge page.
pub fn content_security_policy() -> &'static str {
    &CSP
}

/// What a challenge page shows.
#[derive(Clone, Copy, Debug)]
pub struct PageInput<'a> {
    /// The language: [`Lang::from_accept_language`], unless the zone fixes one.
    pub lang: Lang,
    /// The host the visitor asked for, as it should read on the page.
    pub host: &'a str,
    /// The zone's branding line (its site name), shown above the heading; may be empty.
    pub branding: &'a str,
    /// The zone's footer line; may be empty.
    pub footer: &'a str,
    /// The request's ray id.
    pub ray_id: &'a str,
    /// The challenge token ([`crate::KeyRing::issue_challenge`]).
    pub token: &'a str,
    /// The token's difficulty.
    pub difficulty: Difficulty,
    /// The challenged request's target (`path?query`), to return to once cleared; anything not
    /// a safe same-site path returns to `/` ([`return_path`]).
    pub return_to: &'a str,
    /// The challenged request had a body (a form post, an upload): it is not replayed, and the
    /// page says so.
    pub body_not_resent: bool,
    /// Seconds until the no-JavaScript fallback may be redeemed
    /// ([`crate::Settings::fallback_delay`], less what has passed).
    pub fallback_delay_secs: u64,
}

/// A rendered challenge page and its headers' values. The edge sends it with status
/// [`STATUS`], `Content-Type: text/html; charset=utf-8`, `Content-Security-Policy`,
/// `Content-Language`, `Cache-Control: no-store`, `Vary: Accept, Accept-Language` and
/// `cf-mitigated: challenge`.
#[derive(Clone, Debug)]
pub struct Page {
    /// The HTML document.
    pub html: String,
    /// The `Content-Security-Policy` value.
    pub content_security_policy: &'static str,
    /// The `Content-Language` value.
    pub content_language: &'static str,
}

/// Renders the page.
pub fn render(input: &PageInput<'_>) -> Page {
    let s = input.lang.strings();
    let return_to = return_path(input.return_to).unwrap_or("/");
    let wait = wait_url(input.token, return_to);
    let seconds = input.fallback_delay_secs.to_string();
    let host = [("host", input.host)];
    let secs = [("seconds", seconds.as_str())];
    // The refresh fires a second after the fallback opens, so the clocks' rounding never makes
    // it early.
    let refresh = input.fallback_delay_secs.saturating_add(1);

    let mut html = String::with_capacity(16 * 1024);
    let h = &mut html;
    h.push_str("<!doctype html>\n<html lang=\"");
    escape_into(h, s.tag);
    h.push_str("\">\n<head>\n<meta charset=\"utf-8\">\n");
    h.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    h.push_str("<meta name=\"robots\" content=\"noindex, nofollow\">\n<title>");
    escape_into(h, s.title);
    h.push_str("</title>\n");
    // Without JavaScript the page moves on by itself once the fallback opens.
    let _ = write!(
        h,
        "<noscript><meta http-equiv=\"refresh\" content=\"{refresh}; url="
    );
    escape_into(h, &wait);
    h.push_str("\"></noscript>\n<style>");
    h.push_str(STYLE);
    h.push_str("</style>\n</head>\n<body>\n<main>\n");
    if !input.branding.is_empty() {
        h.push_str("<p class=\"brand\">");
        escape_into(h, input.branding);
        h.push_str("</p>\n");
    }
    h.push_str("<h1>");
    fill_into(h, s.heading, &host);
    h.push_str("</h1>\n<p>");
    fill_into(h, s.explain, &host);
    h.push_str("</p>\n");
    if input.body_not_resent {
        h.push_str("<p class=\"notice\">");
        escape_into(h, s.resend);
        h.push_str("</p>\n");
    }
    let _ = write!(
        h,
        "<form id=\"challenge-form\" method=\"post\" action=\"{VERIFY_PATH}\" data-difficulty=\"{}\" data-progress=\"",
        input.difficulty.get()
    );
    escape_into(h, s.progress);
    h.push_str("\" data-solved=\"");
    escape_into(h, s.solved);
    h.push_str("\" data-failed=\"");
    escape_into(h, s.failed);
    h.push_str("\">\n<input type=\"hidden\" name=\"token\" value=\"");
    escape_into(h, input.token);
    h.push_str("\">\n<input type=\"hidden\" name=\"nonce\" value=\"\">\n");
    h.push_str("<input type=\"hidden\" name=\"return\" value=\"");
    escape_into(h, return_to);
    h.push_str("\">\n</form>\n");
    h.push_str("<p id=\"challenge-status\" role=\"status\" aria-live=\"polite\">");
    escape_into(h, s.working);
    h.push_str("</p>\n<noscript><p>");
    fill_into(h, s.noscript, &secs);
    h.push_str("</p>\n<p><a href=\"");
    escape_into(h, &wait);
    h.push_str("\">");
    escape_into(h, s.continue_link);
    h.push_str("</a></p></noscript>\n<p id=\"challenge-fallback\" hidden>");
    fill_into(h, s.fallback, &secs);
    h.push_str(" <a href=\"");
    escape_into(h, &wait);
    h.push_str("\">");
    escape_into(h, s.continue_link);
    h.push_str("</a></p>\n<p>");
    escape_into(h, s.agents);
    h.push_str("</p>\n</main>\n<footer>\n<p>");
    escape_into(h, s.ray);
    h.push_str(": <code>");
    escape_into(h, input.ray_id);
    h.push_str("</code></p>\n");
    if !input.footer.is_empty() {
        h.push_str("<p>");
        escape_into(h, input.footer);
        h.push_str("</p>\n");
    }
    h.push_str("</footer>\n<script type=\"text/plain\" id=\"challenge-worker\">");
    h.push_str(WORKER);
    h.push_str("</script>\n<script>");
    h.push_str(SCRIPT);
    h.push_str("</script>\n</body>\n</html>\n");

    Page {
        html,
        content_security_policy: content_security_policy(),
        content_language: s.tag,
    }
}

/// Escapes text for an HTML element or a quoted attribute.
pub fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// Writes `template` with each `{name}` replaced by its value, all of it escaped. One pass, so a
/// value that itself reads `{seconds}` stays as it is.
fn fill_into(out: &mut String, template: &str, values: &[(&str, &str)]) {
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        escape_into(out, &rest[..open]);
        let after = &rest[open + 1..];
        let hole = after.find('}').and_then(|close| {
            let name = &after[..close];
            values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v, close))
        });
        match hole {
            Some((value, close)) => {
                escape_into(out, value);
                rest = &after[close + 1..];
            }
            None => {
                escape_into(out, "{");
                rest = after;
            }
        }
    }
    escape_into(out, rest);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_escapes_and_does_not_refill() {
        let mut out = String::new();
        fill_into(&mut out, "a {host} b {n} {x", &[("host", "<{n}>")]);
        assert_eq!(out, "a &lt;{n}&gt; b {n} {x");
    }

    #[test]
    fn assets_cannot_close_their_elements() {
        for asset in [SCRIPT, WORKER, STYLE] {
            let lower = asset.to_ascii_lowercase();
            assert!(!lower.contains("</script") && !lower.contains("</style"));
            assert!(!lower.contains("<!--"));
        }
    }
}

//! The streaming pre-pass (lol_html): drops what agents do not read (scripts, styles,
//! navigation, page header and footer, by element or by ARIA role, hidden elements, forms' controls, embedded media), keeps only the
//! attributes the conversion uses, and bounds what the tree builder and the converter will see:
//! nesting is flattened past [`Limits::max_depth`], and a page with more than
//! [`Limits::max_elements`] elements is refused. lol_html does not build a tree, so this pass is
//! linear in the input whatever its shape.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use lol_html::html_content::Element;
use lol_html::{HtmlRewriter, MemorySettings, Settings, element, end_tag};

use crate::{Error, Limits};

/// Attribute values longer than this are dropped (a `data:` image or a tracking blob in an
/// `href`); a link or image without its URL still leaves its text.
pub const MAX_ATTRIBUTE_BYTES: usize = 8 * 1024;

/// lol_html's memory allowance beyond eight times the page's size.
const LOL_MEMORY_BASE: usize = 16 * 1024 * 1024;

/// Elements removed with their content.
const DROPPED: &[&str] = &[
    "style", "noscript", "template", "svg", "math", "iframe", "object", "embed", "canvas", "nav",
    "button", "input", "select", "textarea", "dialog", "audio", "video", "map", "link",
];

/// Elements whose end tag HTML lets authors omit (or that have no content): they are not
/// counted for nesting, since the tree builder closes them implicitly and lol_html reports no
/// end for them. The tree builder cannot nest these inside themselves without a counted
/// element between, so the tree's depth stays within about twice the counted depth.
const UNCOUNTED: &[&str] = &[
    "p", "li", "dt", "dd", "tr", "td", "th", "thead", "tbody", "tfoot", "option", "optgroup", "rt",
    "rp", "colgroup", "caption", "html", "head", "body",
];

/// Attributes the conversion reads; every other one is removed here.
fn keep_attribute(tag: &str, name: &str) -> bool {
    match name {
        "href" => matches!(tag, "a" | "base"),
        "src" | "alt" => tag == "img",
        "title" => matches!(tag, "a" | "img"),
        "colspan" | "rowspan" => matches!(tag, "td" | "th"),
        "start" => tag == "ol",
        "class" => matches!(tag, "code" | "pre"),
        "name" | "property" | "content" => tag == "meta",
        "type" => tag == "script",
        _ => false,
    }
}

#[derive(Default)]
struct State {
    depth: Cell<usize>,
    /// Open `<article>` or `<main>` elements: a `<header>` or `<footer>` inside one is the
    /// article's own (its title, its byline) and is kept.
    content_depth: Cell<usize>,
    elements: Cell<usize>,
}

/// Runs the pre-pass over UTF-8 `html`, returning the reduced HTML.
pub fn run(html: &str, limits: &Limits) -> Result<String, Error> {
    let state = Rc::new(State::default());
    let out = RefCell::new(String::with_capacity(html.len() / 2));
    let handler_state = Rc::clone(&state);
    let max_depth = limits.max_depth;
    let max_elements = limits.max_elements;
    let settings = Settings::new()
        .append_element_content_handler(element!("*", move |el: &mut Element| {
            visit(el, &handler_state, max_depth, max_elements)
        }))
        // lol_html's buffers hold at most one unfinished token (the page arrives in one write)
        // and its stack of open elements; both are bounded by the page, so the limit is a
        // multiple of the page's size.
        .with_memory_settings(
            MemorySettings::new()
                .with_max_allowed_memory_usage(LOL_MEMORY_BASE + html.len().saturating_mul(8)),
        );
    let mut rewriter = HtmlRewriter::new(settings, |chunk: &[u8]| {
        // lol_html's output is UTF-8 when its input is; a lossy copy costs nothing when valid.
        out.borrow_mut().push_str(&String::from_utf8_lossy(chunk));
    });
    let result = rewriter
        .write(html.as_bytes())
        .and_then(|()| rewriter.end());
    if state.elements.get() > max_elements {
        return Err(Error::TooComplex("too many elements"));
    }
    result.map_err(|e| match e {
        lol_html::errors::RewritingError::MemoryLimitExceeded(_) => {
            Error::TooComplex("pre-pass memory limit")
        }
        other => Error::Rewrite(other.to_string()),
    })?;
    Ok(out.into_inner())
}

fn visit(
    el: &mut Element,
    state: &Rc<State>,
    max_depth: usize,
    max_elements: usize,
) -> lol_html::HandlerResult {
    let count = state.elements.get() + 1;
    state.elements.set(count);
    if count > max_elements {
        return Err("too many elements".into());
    }
    let tag = el.tag_name();
    let tag = tag.as_str();

    // One look at the attributes: what decides dropping, and which ones to remove.
    let mut hidden = false;
    let mut json_ld = false;
    // ARIA landmarks that mean navigation, page header, page footer or search.
    let mut role_nav = false;
    let mut role_chrome = false;
    let mut remove: Vec<String> = Vec::new();
    for attr in el.attributes() {
        let name = attr.name();
        match name.as_str() {
            "hidden" => hidden = true,
            "aria-hidden" => hidden |= attr.value().trim().eq_ignore_ascii_case("true"),
            "role" => {
                let role = attr.value();
                let role = role.trim();
                role_nav =
                    role.eq_ignore_ascii_case("navigation") || role.eq_ignore_ascii_case("search");
                role_chrome =
                    role.eq_ignore_ascii_case("banner") || role.eq_ignore_ascii_case("contentinfo");
            }
            "type" if tag == "script" => {
                json_ld = attr
                    .value()
                    .trim()
                    .eq_ignore_ascii_case("application/ld+json");
            }
            _ => {}
        }
        let keep = keep_attribute(tag, &name) && {
            let value = attr.value();
            value.len() <= MAX_ATTRIBUTE_BYTES
                && !(name == "src" && value.trim_start().starts_with("data:"))
        };
        if !keep {
            remove.push(name);
        }
    }
    let dropped = hidden
        || role_nav
        || DROPPED.contains(&tag)
        || ((role_chrome || matches!(tag, "header" | "footer")) && state.content_depth.get() == 0)
        || (tag == "script" && !json_ld);
    if dropped {
        el.remove();
    } else {
        for name in remove {
            el.remove_attribute(&name);
        }
    }

    if !el.can_have_content() || UNCOUNTED.contains(&tag) {
        return Ok(());
    }
    let depth = state.depth.get() + 1;
    state.depth.set(depth);
    if depth > max_depth && !dropped {
        // The text stays; only the element's own tags go.
        el.remove_and_keep_content();
    }
    let is_content = matches!(tag, "article" | "main");
    if is_content {
        state.content_depth.set(state.content_depth.get() + 1);
    }
    let end_state = Rc::clone(state);
    // Cannot fail: `can_have_content` was checked above.
    el.on_end_tag(end_tag!(move |_end| {
        end_state.depth.set(end_state.depth.get().saturating_sub(1));
        if is_content {
            end_state
                .content_depth
                .set(end_state.content_depth.get().saturating_sub(1));
        }
        Ok(())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::default()
    }

    #[test]
    fn drops_chrome_and_scripts_but_keeps_json_ld_and_article_headers() {
        let html = r#"<html><head><script>alert(1)</script><style>p{}</style>
            <script type="application/ld+json">{"a":1}</script></head><body>
            <header>site header</header><nav>menu</nav><div hidden>cookie banner</div>
            <div role="navigation">sidebar</div><div role="banner">banner</div>
            <article><header><h1>Title</h1></header><p onclick="x" class="c">Text</p></article>
            <footer>site footer</footer></body></html>"#;
        let out = run(html, &limits()).unwrap();
        assert!(!out.contains("alert"));
        assert!(!out.contains("p{}"));
        assert!(out.contains(r#"<script type="application/ld+json">{"a":1}</script>"#));
        assert!(!out.contains("site header"));
        assert!(!out.contains("menu"));
        assert!(!out.contains("cookie banner"));
        assert!(!out.contains("sidebar") && !out.contains(">banner<"));
        assert!(!out.contains("site footer"));
        assert!(out.contains("<header><h1>Title</h1></header>"));
        assert!(out.contains("<p>Text</p>"));
    }

    #[test]
    fn attributes_are_reduced_and_data_urls_dropped() {
        let long = "x".repeat(MAX_ATTRIBUTE_BYTES + 1);
        let html = format!(
            r#"<a href="/a" style="x" data-long="{long}">a</a><img src="data:image/png;base64,AAA" alt="pic"><a href="/{long}">b</a>"#
        );
        let out = run(&html, &limits()).unwrap();
        assert_eq!(out, r#"<a href="/a">a</a><img alt="pic"><a>b</a>"#);
    }

    #[test]
    fn nesting_past_the_limit_is_flattened() {
        let depth = 100_000;
        let html = format!("{}deep{}", "<div>".repeat(depth), "</div>".repeat(depth));
        let limits = Limits {
            max_depth: 64,
            ..Limits::default()
        };
        let out = run(&html, &limits).unwrap();
        assert_eq!(out.matches("<div>").count(), 64);
        assert!(out.contains("deep"));
        // Siblings after the deep part are back at depth 1 and keep their tags.
        let html = format!(
            "{}{}<div><b>after</b></div>",
            "<div>".repeat(200),
            "</div>".repeat(200)
        );
        let out = run(&html, &limits).unwrap();
        assert!(out.ends_with("<div><b>after</b></div>"), "{out}");
    }

    #[test]
    fn element_cap_refuses() {
        let html = "<i>x</i>".repeat(1000);
        let limits = Limits {
            max_elements: 999,
            ..Limits::default()
        };
        assert!(matches!(run(&html, &limits), Err(Error::TooComplex(_))));
        let limits = Limits {
            max_elements: 1000,
            ..Limits::default()
        };
        assert!(run(&html, &limits).is_ok());
    }
}

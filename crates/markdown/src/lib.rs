//! Origin HTML converted to Markdown for agents, as the edge sends it.
//!
//! The pipeline, each step bounded:
//!
//! 1. [`decode_body`] undoes gzip, deflate, br or zstd with the decoded size capped
//!    ([`Limits::max_bytes`]), and [`to_utf8`] decodes the charset the page declares.
//! 2. html5ever tokenizes the page once; a filter between its tokenizer and its tree builder
//!    (linear whatever the page's shape) drops scripts, styles, navigation, decorative images
//!    (`alt=""`), the page's header
//!    and footer, form controls and comments, keeps only the attributes the conversion reads,
//!    flattens nesting past [`Limits::max_depth`], refuses pages with more than
//!    [`Limits::max_elements`] elements, and gives the tree builder each run of text as one
//!    token (the tokenizer cuts it at every character reference).
//! 3. The tree builder builds the tree (no recursion); one pass drops navigation that nothing
//!    marks but its shape (blocks of links outside the content, language bars, breadcrumbs;
//!    see `navigation.rs`); one iterative walk collects the title,
//!    description, Open Graph image, `<base href>` and JSON-LD, makes links and images
//!    absolute against `<base href>` or the request URL (or, as [`LinkForm::RootRelative`] asks,
//!    root-relative when on the page's own origin), cuts `<code>` elements at the links they
//!    hold (so each link is a link, not text in a code span), turns no-break spaces outside code into
//!    plain ones, and replaces `<div>`s that only wrap
//!    blocks by those blocks (the same Markdown, fewer copies in htmd), and makes htmd's joins of
//!    neighbouring inline elements in one pass (htmd's own are quadratic). A tree deeper than
//!    [`MAX_TREE_DEPTH`] is refused, so the converter's recursion has a bounded stack.
//! 4. htmd (turndown's rules) writes the Markdown, tables by a handler of ours (GFM's `\|` for
//!    a `|` in a cell, no padding); we add YAML frontmatter (`title`, `description`, `image`,
//!    and `url` when links are root-relative, each a YAML-safe scalar) and the JSON-LD as one
//!    fenced `json` block.
//!
//! Any [`Error`] means the caller sends the original HTML unchanged.
//!
//! ```
//! use signpost_markdown::{convert, Limits, Source};
//!
//! let html = br#"<html><head><title>Hello</title></head>
//!   <body><nav>menu</nav><h1>Hi</h1><p>See <a href="/docs">the docs</a>.</p></body></html>"#;
//! let source = Source { body: html, content_type: Some("text/html"), content_encoding: None };
//! let md = convert(&source, Some("https://example.com/a/"), &Limits::default())?;
//! assert_eq!(md, "---\ntitle: \"Hello\"\n---\n\n# Hi\n\nSee [the docs](https://example.com/docs).\n");
//! # Ok::<(), signpost_markdown::Error>(())
//! ```

#![deny(missing_docs)]

mod decode;
mod dom;
mod filter;
mod navigation;
mod options;
mod table;

use std::fmt::Write as _;

use htmd::HtmlToMarkdown;
use htmd::options::{BulletListMarker, Options};
use url::Url;

pub use decode::{MAX_CODINGS, decode_body, sniff_encoding, to_utf8};
pub use filter::{MAX_ATTRIBUTE_BYTES, MAX_ELEMENT_NAMES};
pub use options::{
    DEFAULT_MAX_BYTES, DEFAULT_MAX_ELEMENTS, Error, Limits, LinkForm, MAX_JSON_LD_BLOCKS,
    MAX_TREE_DEPTH, PARSE_CHUNK_BYTES,
};

/// An origin response body with the headers that say how to read it.
#[derive(Clone, Copy, Debug)]
pub struct Source<'a> {
    /// The body bytes as received.
    pub body: &'a [u8],
    /// The `Content-Type` value (for its `charset`).
    pub content_type: Option<&'a str>,
    /// The `Content-Encoding` value.
    pub content_encoding: Option<&'a str>,
}

/// Whether a `Content-Type` value names HTML or XHTML.
pub fn is_html(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("text/html")
        || essence.eq_ignore_ascii_case("application/xhtml+xml")
}

/// The memory [`convert_html`] may hold at its peak for a decoded page, for a caller's memory
/// budget: [`WORKING_BYTES_PER_BYTE`] per byte of page (text, the Markdown and htmd's copies of
/// it) and [`WORKING_BYTES_PER_TAG`] per start tag, up to [`DEFAULT_MAX_ELEMENTS`] of them
/// (each element is a tree node and its text another; pages with more are refused during the
/// parse). `tests/memory.rs` holds it to the peak allocated on real pages and on the shapes
/// that cost the most per byte.
pub fn working_bytes(html: &[u8]) -> usize {
    let tags = html
        .windows(2)
        .filter(|pair| pair[0] == b'<' && pair[1].is_ascii_alphabetic())
        .take(DEFAULT_MAX_ELEMENTS + 1)
        .count();
    html.len()
        .saturating_mul(WORKING_BYTES_PER_BYTE)
        .saturating_add(tags.saturating_mul(WORKING_BYTES_PER_TAG))
}

/// See [`working_bytes`].
pub const WORKING_BYTES_PER_BYTE: usize = 8;

/// See [`working_bytes`].
pub const WORKING_BYTES_PER_TAG: usize = 600;

/// Decodes and converts an origin body; `url` is the request URL that relative links resolve
/// against (with `<base href>` applied on top).
pub fn convert(source: &Source<'_>, url: Option<&str>, limits: &Limits) -> Result<String, Error> {
    convert_with(source, url, limits, LinkForm::Absolute)
}

/// [`convert`] with the links written as `links` says.
pub fn convert_with(
    source: &Source<'_>,
    url: Option<&str>,
    limits: &Limits,
    links: LinkForm,
) -> Result<String, Error> {
    convert_within(source, url, limits, links, |_| Some(()))
}

/// [`convert_with`] within a memory budget: once the page is decoded, `reserve` is given its
/// [`working_bytes`] and says whether there is room ([`Error::NoRoom`] if not); what it returns
/// (a reservation) is held until the conversion ends.
pub fn convert_within<R>(
    source: &Source<'_>,
    url: Option<&str>,
    limits: &Limits,
    links: LinkForm,
    reserve: impl FnOnce(usize) -> Option<R>,
) -> Result<String, Error> {
    let decoded = decode_body(source.body, source.content_encoding, limits.max_bytes)?;
    let text = to_utf8(&decoded, source.content_type);
    let _reservation = reserve(working_bytes(text.as_bytes())).ok_or(Error::NoRoom)?;
    let base = url.and_then(|u| Url::parse(u).ok());
    convert_html_with(&text, base.as_ref(), limits, links)
}

/// Converts UTF-8 HTML (already decoded) to the Markdown the edge sends.
pub fn convert_html(html: &str, url: Option<&Url>, limits: &Limits) -> Result<String, Error> {
    convert_html_with(html, url, limits, LinkForm::Absolute)
}

/// [`convert_html`] with the links written as `links` says.
pub fn convert_html_with(
    html: &str,
    url: Option<&Url>,
    limits: &Limits,
    links: LinkForm,
) -> Result<String, Error> {
    if html.len() > limits.max_bytes {
        return Err(Error::TooLarge);
    }
    let dom = filter::parse(html, limits)?;
    dom::remove_all(&navigation::find(&dom.document));
    let meta = dom::walk_with(&dom.document, url, links, html.len())?;
    let body = CONVERTER.with(|converter| converter.tree_to_markdown(&dom.document));
    // The tree is the largest thing held, and the line pass needs only the Markdown.
    drop(dom);
    Ok(assemble(&meta, &strip_trailing_spaces(body.trim())))
}

thread_local! {
    /// htmd's converter holds its handler table; built once per thread.
    static CONVERTER: HtmlToMarkdown = HtmlToMarkdown::builder()
        .options(Options {
            bullet_list_marker: BulletListMarker::Dash,
            ul_bullet_spacing: 1,
            ol_number_spacing: 1,
            ..Options::default()
        })
        .skip_tags(vec!["head", "script", "style"])
        .add_handler(vec!["table"], table::table_handler)
        .build();
}

fn assemble(meta: &dom::Meta, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 512);
    let title = meta.title.as_ref().or(meta.og_title.as_ref());
    let description = meta.description.as_ref().or(meta.og_description.as_ref());
    let fields = [
        ("title", title),
        ("description", description),
        ("image", meta.image.as_ref()),
        ("url", meta.url.as_ref()),
    ];
    if fields.iter().any(|(_, v)| v.is_some()) {
        out.push_str("---\n");
        for (key, value) in fields {
            if let Some(value) = value {
                out.push_str(key);
                out.push_str(": ");
                yaml_string(&mut out, value);
                out.push('\n');
            }
        }
        out.push_str("---\n\n");
    }
    out.push_str(body);
    out.push('\n');
    if let Some(json) = json_ld(&meta.json_ld) {
        let fence = "`".repeat(longest_run(&json, '`').max(2) + 1);
        let _ = write!(out, "\n{fence}json\n{json}\n{fence}\n");
    }
    out
}

/// htmd leaves the space that ended a block's last line of text (`<dt>--edit </dt>`). One
/// trailing space means nothing in CommonMark and costs a token per line; two or more are a
/// hard line break and stay, and so does everything inside fenced code blocks.
///
/// A line pass, not a full reader: it follows fences through block quotes and list items
/// (`- ```) and keeps lines that may be indented code, but it does not know which list item a
/// continuation line belongs to, nor whether a code span runs over a line's end. On the
/// Markdown htmd writes for tag soup (a `<pre>` in a heading, `<code><pre>`, lists closed
/// around a fence) a property test against pulldown-cmark still finds lines where the dropped
/// space was inside code: one space of a code span or block, never text.
fn strip_trailing_spaces(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut fence: Option<Fence> = None;
    // Line by line, not a list of lines: a page may be millions of short lines.
    for (i, content) in md.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        // Inside a fence every byte stays. A line outside the fence's list item or block quote
        // ends the fence with its container, and is read afresh.
        if let Some(closes) = fence.as_ref().and_then(|open| open.reads(content)) {
            if closes {
                fence = None;
            }
            out.push_str(content);
            continue;
        }
        let start = LineStart::of(content);
        fence = Fence::opened_by(&start);
        // Four spaces of a line's own may be indented code (whether they are depends on the line
        // before, which only a full reader knows), and keep their spaces.
        let single = fence.is_none()
            && start.indent < 4
            && content.ends_with(' ')
            && !content.ends_with("  ")
            // `\` at a line's end is a hard break.
            && !content.ends_with("\\ ");
        out.push_str(if single {
            &content[..content.len() - 1]
        } else {
            content
        });
    }
    out
}

/// An open fenced code block, as a CommonMark reader tracks it: its character and length, and
/// the block quote depth and column where its container's content starts.
struct Fence {
    char: u8,
    len: usize,
    quotes: usize,
    container: usize,
}

impl Fence {
    /// The fence a line opens.
    fn opened_by(line: &LineStart) -> Option<Fence> {
        let text = line.text;
        let char = *text
            .as_bytes()
            .first()
            .filter(|c| matches!(c, b'`' | b'~'))?;
        let len = text.bytes().take_while(|&b| b == char).count();
        // Four spaces of its own make indented code; a backtick fence's info string holds no
        // backtick (else the line is a code span).
        let fence = len >= 3 && line.indent <= 3 && !(char == b'`' && text[len..].contains('`'));
        fence.then_some(Fence {
            char,
            len,
            quotes: line.quotes,
            container: line.container,
        })
    }

    /// `None` when the line stands outside the fence's container (which ends the fence), else
    /// whether it closes the fence.
    fn reads(&self, line: &str) -> Option<bool> {
        let text = line.trim_start_matches([' ', '>']);
        let col = line.len() - text.len();
        let quotes = line[..col].bytes().filter(|&b| b == b'>').count();
        if text.is_empty() && quotes >= self.quotes {
            return Some(false);
        }
        if quotes < self.quotes || (quotes == self.quotes && col < self.container) {
            return None;
        }
        let run = text.bytes().take_while(|&b| b == self.char).count();
        Some(
            quotes == self.quotes
                && col - self.container <= 3
                && run >= self.len
                && text[run..].bytes().all(|b| b == b' '),
        )
    }
}

/// How a line starts: its block quote depth, the column where its innermost container's content
/// starts, the spaces of its own after that, and the text after them.
struct LineStart<'a> {
    quotes: usize,
    container: usize,
    indent: usize,
    text: &'a str,
}

impl<'a> LineStart<'a> {
    fn of(line: &'a str) -> LineStart<'a> {
        let (mut quotes, mut container, mut rest) = (0, 0, line);
        loop {
            let text = rest.trim_start_matches(' ');
            let indent = rest.len() - text.len();
            let end = LineStart {
                quotes,
                container,
                indent,
                text,
            };
            // Four spaces or more make indented code (in the container so far), markers or not.
            if indent >= 4 {
                return end;
            }
            if let Some(after) = text.strip_prefix('>') {
                quotes += 1;
                // The one space after `>` belongs to the marker.
                rest = after.strip_prefix(' ').unwrap_or(after);
                container = line.len() - rest.len();
                continue;
            }
            let digits = text.bytes().take_while(u8::is_ascii_digit).count();
            let marker = match text.as_bytes() {
                [b'-' | b'*' | b'+', b' ', ..] => 2,
                [..] if (1..=9).contains(&digits)
                    && matches!(text.as_bytes()[digits..], [b'.' | b')', b' ', ..]) =>
                {
                    digits + 2
                }
                _ => return end,
            };
            rest = &text[marker..];
            container = line.len() - rest.len();
        }
    }
}

/// Always a quoted scalar, so a title such as `yes`, `2026-01-01` or `1.0` reads back as the
/// string it is in every YAML parser (the error contract's scalar writer does the escaping).
fn yaml_string(out: &mut String, value: &str) {
    let mut scalar = String::with_capacity(value.len() + 2);
    signpost_problem::yaml_scalar(&mut scalar, value);
    if scalar.starts_with('"') {
        out.push_str(&scalar);
    } else {
        // The plain form is `[a-z0-9.-]` only, so quoting it needs no escapes.
        out.push('"');
        out.push_str(&scalar);
        out.push('"');
    }
}

/// The JSON-LD blocks that parse, as one pretty-printed document: the block itself when there
/// is one, else an array of them. Blocks that do not parse are dropped.
fn json_ld(blocks: &[String]) -> Option<String> {
    let mut values: Vec<serde_json::Value> = blocks
        .iter()
        .filter_map(|b| serde_json::from_str(b.trim()).ok())
        .collect();
    let value = match values.len() {
        0 => return None,
        1 => values.pop()?,
        _ => serde_json::Value::Array(values),
    };
    serde_json::to_string_pretty(&value).ok()
}

fn longest_run(s: &str, c: char) -> usize {
    let (mut best, mut run) = (0, 0);
    for ch in s.chars() {
        if ch == c {
            run += 1;
            best = best.max(run);
        } else {
            run = 0;
        }
    }
    best
}

#[cfg(test)]
mod tests;

/// The time each step of [`convert_html`] takes on `html` (the tokenizer alone, the filtered
/// tree, walk, htmd, the line pass that drops single trailing spaces), for the throughput example.
/// The first figure is part of the second: it is the tokenizer with a sink that drops every
/// token.
#[doc(hidden)]
pub fn step_times(html: &str, url: Option<&Url>, limits: &Limits) -> [std::time::Duration; 5] {
    let mut times = [std::time::Duration::ZERO; 5];
    let t0 = std::time::Instant::now();
    filter::tokenize_only(html);
    let t1 = std::time::Instant::now();
    times[0] = t1 - t0;
    let Ok(dom) = filter::parse(html, limits) else {
        return times;
    };
    dom::remove_all(&navigation::find(&dom.document));
    let t2 = std::time::Instant::now();
    let _ = dom::walk_with(&dom.document, url, LinkForm::Absolute, html.len());
    let t3 = std::time::Instant::now();
    let body = CONVERTER.with(|converter| converter.tree_to_markdown(&dom.document));
    let t4 = std::time::Instant::now();
    std::hint::black_box(strip_trailing_spaces(body.trim()));
    let t5 = std::time::Instant::now();
    [times[0], t2 - t1, t3 - t2, t4 - t3, t5 - t4]
}

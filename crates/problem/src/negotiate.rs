//! Content negotiation: the request's `Accept` header picks the response format.

use mediatype::{MediaType, ReadParams, names};

/// The format of a problem response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// A page for people.
    Html,
    /// RFC 9457 JSON sent as `application/json`.
    Json,
    /// The same JSON sent as `application/problem+json`.
    ProblemJson,
    /// Markdown with YAML frontmatter, for agents.
    Markdown,
    /// Plain text: an operator's own `text`, offered only for an answer whose error rule gives
    /// one ([`negotiate_offering_text`]); never the contract's default for any `Accept`.
    Text,
}

impl Format {
    /// The exact `Content-Type` header value.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Html => "text/html; charset=utf-8",
            Format::Json => "application/json; charset=utf-8",
            Format::ProblemJson => "application/problem+json; charset=utf-8",
            Format::Markdown => "text/markdown; charset=utf-8",
            Format::Text => "text/plain; charset=utf-8",
        }
    }

    /// A short name for logs and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Html => "html",
            Format::Json => "json",
            Format::ProblemJson => "problem+json",
            Format::Markdown => "markdown",
            Format::Text => "text",
        }
    }

    /// Whether this is one of the structured formats for agents (JSON or Markdown): plain text
    /// carries no machine fields.
    pub fn is_structured(self) -> bool {
        matches!(self, Format::Json | Format::ProblemJson | Format::Markdown)
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// At most this many `Accept` entries are looked at; the rest are ignored. Real clients send
/// fewer than ten, and the cap keeps work bounded on hostile headers.
pub const MAX_ACCEPT_ENTRIES: usize = 64;

/// A format with its media type: type, subtype and `+suffix`.
type Offer = (Format, &'static str, &'static str, Option<&'static str>);

/// The formats we serve with their media type, in tie-break order: when one range matches two
/// formats (`text/*`, `application/*`) at the same q, the earlier one here wins, so structured
/// types beat HTML, plain JSON beats problem+json, and `text/*` stays Markdown when plain text
/// is offered too (last, and only by [`negotiate_offering_text`]).
const OFFERS: [Offer; 5] = [
    (Format::Markdown, "text", "markdown", None),
    (Format::Json, "application", "json", None),
    (Format::ProblemJson, "application", "problem", Some("json")),
    (Format::Html, "text", "html", None),
    (Format::Text, "text", "plain", None),
];

/// The contract's offers: every format but plain text.
const CONTRACT_OFFERS: &[Offer] = OFFERS.split_at(4).0;

/// How specifically a range matched an offer: `*/*` < `type/*` < `type/subtype`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Specificity {
    Any = 1,
    Type = 2,
    Exact = 3,
}

#[derive(Clone, Copy)]
struct Match {
    specificity: Specificity,
    /// q-value in thousandths (RFC 9110 allows at most three decimals).
    q: u16,
    /// Position of the range in the header.
    index: usize,
}

/// Picks the response format for an `Accept` header value (raw bytes; `None` when absent).
///
/// RFC 9110 §12.5.1 ranks the ranges: for each format the most specific matching range gives its
/// q (`q=0` = not acceptable). Only formats that the client named explicitly (by a range other
/// than `*/*`) compete: highest q wins, then the range listed first, then the structured format
/// when one range covers two (`text/*` gives Markdown). When nothing explicit is acceptable (no
/// header, `*/*`, junk) the answer is HTML, so browsers and old clients keep their page.
///
/// ```
/// use signpost_problem::{negotiate, Format};
/// assert_eq!(negotiate(Some(b"application/json, text/markdown;q=0.9")), Format::Json);
/// assert_eq!(negotiate(Some(b"*/*")), Format::Html);
/// assert_eq!(negotiate(None), Format::Html);
/// ```
pub fn negotiate(accept: Option<&[u8]>) -> Format {
    pick(accept, CONTRACT_OFFERS)
}

/// As [`negotiate`], with plain text (`text/plain`) offered too: for an answer whose error rule
/// gives `text`, which is then its own `text/plain` answer when the client ranks `text/plain`
/// first. `text/*` still gets Markdown, and a client that does not name `text/plain` gets what
/// [`negotiate`] gives.
///
/// ```
/// use signpost_problem::{negotiate_offering_text, Format};
/// assert_eq!(negotiate_offering_text(Some(b"text/plain")), Format::Text);
/// assert_eq!(negotiate_offering_text(Some(b"text/*")), Format::Markdown);
/// assert_eq!(negotiate_offering_text(Some(b"application/json, text/plain")), Format::Json);
/// ```
pub fn negotiate_offering_text(accept: Option<&[u8]>) -> Format {
    pick(accept, &OFFERS)
}

/// The format among `offers` that the header ranks first (see [`negotiate`]).
fn pick(accept: Option<&[u8]>, offers: &[Offer]) -> Format {
    let Some(header) = accept else {
        return Format::Html;
    };
    let mut best: [Option<Match>; OFFERS.len()] = [None; OFFERS.len()];
    for (index, raw) in split_list(header).take(MAX_ACCEPT_ENTRIES).enumerate() {
        let Some((media, q)) = parse_range(raw) else {
            continue;
        };
        let (ty, subty) = (media.ty.as_str(), media.subty.as_str());
        let suffix = media.suffix.as_ref().map(|s| s.as_str());
        for (slot, &(_, o_ty, o_subty, o_suffix)) in best.iter_mut().zip(offers) {
            let specificity = if ty == "*" && subty == "*" && suffix.is_none() {
                Specificity::Any
            } else if !ty.eq_ignore_ascii_case(o_ty) {
                continue;
            } else if subty == "*" && suffix.is_none() {
                Specificity::Type
            } else if subty.eq_ignore_ascii_case(o_subty)
                && match (suffix, o_suffix) {
                    (None, None) => true,
                    (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
                    _ => false,
                }
            {
                Specificity::Exact
            } else {
                continue;
            };
            // A more specific range overrides; at equal specificity the first one stands.
            if slot.is_none_or(|m| specificity > m.specificity) {
                *slot = Some(Match {
                    specificity,
                    q,
                    index,
                });
            }
        }
    }
    let mut winner: Option<(Format, Match)> = None;
    for (slot, &(format, ..)) in best.iter().zip(offers) {
        let Some(m) = *slot else { continue };
        if m.specificity == Specificity::Any || m.q == 0 {
            continue;
        }
        // Strictly better only: on a full tie the earlier offer (structured first) stays.
        let better = winner.is_none_or(|(_, w)| m.q > w.q || (m.q == w.q && m.index < w.index));
        if better {
            winner = Some((format, m));
        }
    }
    winner.map_or(Format::Html, |(format, _)| format)
}

/// Splits a comma-separated header list, keeping commas inside quoted strings, and trims
/// optional whitespace. Linear in the input; yields lazily so the caller's cap bounds the work.
pub(crate) fn split_list(header: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = header;
    std::iter::from_fn(move || {
        loop {
            if rest.is_empty() {
                return None;
            }
            let mut in_quotes = false;
            let mut escaped = false;
            let mut end = rest.len();
            for (i, &b) in rest.iter().enumerate() {
                if in_quotes {
                    if escaped {
                        escaped = false;
                    } else if b == b'\\' {
                        escaped = true;
                    } else if b == b'"' {
                        in_quotes = false;
                    }
                } else if b == b'"' {
                    in_quotes = true;
                } else if b == b',' {
                    end = i;
                    break;
                }
            }
            let item = trim_ows(&rest[..end]);
            rest = rest.get(end + 1..).unwrap_or(&[]);
            // RFC 9110 §5.6.1: empty list elements are ignored.
            if !item.is_empty() {
                return Some(item);
            }
        }
    })
}

pub(crate) fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', tail @ ..] = s {
        s = tail;
    }
    while let [head @ .., b' ' | b'\t'] = s {
        s = head;
    }
    s
}

/// Parses one media range and its q in thousandths, or `None` when it is
/// malformed: not UTF-8, bad media-range syntax, or a q-value outside RFC 9110's grammar
/// (`q=abc`, `q=2`, `q=0.0001`), which makes the whole range meaningless.
///
/// The media-range grammar (tokens, `+suffix`, parameters, quoted strings, case) is left to the
/// maintained `mediatype` crate; splitting the list and the q-value stay here because they are
/// where hostile input bites: the list is split on raw bytes with a cap on entries, so neither
/// non-UTF-8 bytes nor thousands of entries cost more than a linear scan of the first few.
fn parse_range(raw: &[u8]) -> Option<(MediaType<'_>, u16)> {
    let text = std::str::from_utf8(raw).ok()?;
    let media = MediaType::parse(text).ok()?;
    let q = match media.get_param(names::Q) {
        Some(value) => parse_qvalue(value.as_str())?,
        None => 1000,
    };
    Some((media, q))
}

/// RFC 9110 §12.4.2: `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`.
pub(crate) fn parse_qvalue(s: &str) -> Option<u16> {
    let bytes = s.as_bytes();
    let (&first, rest) = bytes.split_first()?;
    let decimals = match rest {
        [] => &[][..],
        [b'.', d @ ..] if d.len() <= 3 => d,
        _ => return None,
    };
    match first {
        b'0' => {
            let mut thousandths = 0u16;
            for (i, d) in decimals.iter().enumerate() {
                if !d.is_ascii_digit() {
                    return None;
                }
                thousandths += u16::from(d - b'0') * [100, 10, 1][i];
            }
            Some(thousandths)
        }
        b'1' if decimals.iter().all(|&d| d == b'0') => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(accept: &str) -> Format {
        negotiate(Some(accept.as_bytes()))
    }

    #[test]
    fn contract_table() {
        let rows: &[(&str, Format)] = &[
            ("application/json", Format::Json),
            ("application/json; charset=utf-8", Format::Json),
            ("application/problem+json", Format::ProblemJson),
            ("application/json, text/markdown;q=0.9", Format::Json),
            ("application/json, text/markdown", Format::Json),
            ("text/markdown", Format::Markdown),
            ("text/markdown, application/json", Format::Markdown),
            ("text/markdown, */*", Format::Markdown),
            ("text/*", Format::Markdown),
            ("*/*", Format::Html),
            ("text/html", Format::Html),
        ];
        for (accept, want) in rows {
            assert_eq!(n(accept), *want, "{accept}");
        }
        assert_eq!(negotiate(None), Format::Html);
    }

    #[test]
    fn plain_text_only_when_offered_and_ranked_first() {
        let t = |accept: &str| negotiate_offering_text(Some(accept.as_bytes()));
        // The contract never answers plain text.
        assert_eq!(n("text/plain"), Format::Html);
        assert_eq!(n("text/plain, text/markdown"), Format::Markdown);
        // Offered: the client's ranking decides, `text/*` stays Markdown.
        for (accept, want) in [
            ("text/plain", Format::Text),
            ("TEXT/PLAIN; charset=utf-8", Format::Text),
            ("text/plain, text/markdown", Format::Text),
            ("text/markdown, text/plain", Format::Markdown),
            ("text/markdown;q=0.5, text/plain", Format::Text),
            ("text/plain;q=0.5, application/json", Format::Json),
            ("text/*", Format::Markdown),
            ("text/*, text/markdown;q=0", Format::Html),
            ("text/plain;q=0", Format::Html),
            ("*/*", Format::Html),
            (
                "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
                Format::Html,
            ),
        ] {
            assert_eq!(t(accept), want, "{accept}");
        }
        assert_eq!(negotiate_offering_text(None), Format::Html);
        // Every other header negotiates as the contract says.
        for accept in [
            "application/json",
            "text/markdown",
            "application/problem+json",
            "junk",
        ] {
            assert_eq!(t(accept), n(accept), "{accept}");
        }
    }

    #[test]
    fn browsers_get_html() {
        assert_eq!(
            n("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
            Format::Html
        );
        assert_eq!(
            n(
                "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7"
            ),
            Format::Html
        );
    }

    #[test]
    fn junk_gets_html() {
        for accept in [
            "", " ", ",,,", "garbage", "text", "/", "text/", ";q=1", "*/json",
        ] {
            assert_eq!(n(accept), Format::Html, "{accept:?}");
        }
        assert_eq!(negotiate(Some(b"\xff\xfe/\x80")), Format::Html);
        // A non-UTF-8 entry spoils only itself.
        assert_eq!(
            negotiate(Some(b"\xff/\xff, text/markdown")),
            Format::Markdown
        );
    }

    #[test]
    fn q_values() {
        assert_eq!(n("text/markdown;q=0"), Format::Html);
        assert_eq!(n("text/markdown;q=0.000"), Format::Html);
        assert_eq!(
            n("text/markdown;q=0, application/json;q=0.001"),
            Format::Json
        );
        assert_eq!(
            n("application/json;q=0.5, text/markdown;q=0.8"),
            Format::Markdown
        );
        assert_eq!(n("text/html;q=0.1, application/json"), Format::Json);
        assert_eq!(n("application/json;q=1.000"), Format::Json);
        // Malformed q-values void their range.
        for accept in [
            "application/json;q=abc",
            "application/json;q=2",
            "application/json;q=1.5",
            "application/json;q=0.0001",
            "application/json;q=",
            "application/json;q=.5",
            "application/json;q=-1",
        ] {
            assert_eq!(n(accept), Format::Html, "{accept}");
        }
        assert_eq!(
            n("application/json;q=2, text/markdown;q=0.1"),
            Format::Markdown
        );
    }

    #[test]
    fn specific_ranges_override() {
        assert_eq!(n("text/*, text/markdown;q=0"), Format::Html);
        assert_eq!(n("text/*;q=0.5, text/html;q=0"), Format::Markdown);
        assert_eq!(n("application/*"), Format::Json);
        assert_eq!(
            n("application/*, application/json;q=0"),
            Format::ProblemJson
        );
        assert_eq!(n("*/*, text/markdown;q=0.1"), Format::Markdown);
    }

    #[test]
    fn case_whitespace_and_params() {
        assert_eq!(n("TEXT/MARKDOWN"), Format::Markdown);
        assert_eq!(n("Application/Problem+JSON"), Format::ProblemJson);
        assert_eq!(n("application/json;Q=0, text/markdown"), Format::Markdown);
        assert_eq!(
            n("  text/markdown ;  q=0.5 , application/json;q=0.4 "),
            Format::Markdown
        );
        assert_eq!(
            n("\ttext/markdown;charset=utf-8;variant=gfm"),
            Format::Markdown
        );
        assert_eq!(
            n("text/markdown; foo=\"a,application/json\""),
            Format::Markdown
        );
        assert_eq!(
            n("application/problem+json;charset=utf-8, application/json"),
            Format::ProblemJson
        );
    }

    #[test]
    fn hostile_headers_stay_bounded() {
        let many = "text/plain, ".repeat(10_000) + "application/json";
        // Past the cap: ignored, so HTML.
        assert_eq!(n(&many), Format::Html);
        let long = format!("text/markdown;x=\"{}\"", "a".repeat(64 * 1024));
        assert_eq!(n(&long), Format::Markdown);
        let quotes = "\"".repeat(64 * 1024);
        assert_eq!(n(&quotes), Format::Html);
    }

    #[test]
    fn names() {
        assert_eq!(Format::ProblemJson.as_str(), "problem+json");
        assert_eq!(
            Format::Markdown.content_type(),
            "text/markdown; charset=utf-8"
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = negotiate(Some(&bytes));
            let _ = negotiate_offering_text(Some(&bytes));
        }

        #[test]
        fn arbitrary_lists_never_panic(s in r#"([a-z*/+;=q0-9."\\ ,\t-]|TEXT|json|markdown){0,64}"#) {
            let _ = negotiate(Some(s.as_bytes()));
        }
    }
}

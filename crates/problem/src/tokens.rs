//! `::NAME::` tokens in an operator's error content, and the escaping of their values for the
//! place each lands in.
//!
//! Token values come from the request (the Host is whatever the client sent), so a value is
//! never inserted raw: it is escaped for the format around it, and in Markdown it is kept on one
//! line so that it cannot open a block (a heading, a list, a fence, the frontmatter's `---`).

use std::fmt::Write as _;
use std::ops::Range;

/// Every token an operator may write, without the surrounding `::`.
pub const TOKENS: &[&str] = &[
    "CLIENT_IP",
    "RAY_ID",
    "GEO",
    "CODE",
    "RETRY_AFTER",
    "ZONE",
    "HOST",
];

/// The values of the tokens for one answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenValues<'a> {
    /// `::CLIENT_IP::`: the client address the policy derived.
    pub client_ip: &'a str,
    /// `::RAY_ID::`.
    pub ray_id: &'a str,
    /// `::GEO::`: the client's country (ISO code), empty without a country database.
    pub geo: &'a str,
    /// `::CODE::`: the error code of the answer (1015, 522, or the origin's status).
    pub code: u16,
    /// `::RETRY_AFTER::`: seconds to wait, empty when the answer is not retryable.
    pub retry_after: Option<u32>,
    /// `::ZONE::`: the requested host name as the `zone` member shows it.
    pub zone: &'a str,
    /// `::HOST::`: the Host header as the client sent it (with its port, if any).
    pub host: &'a str,
}

/// How a token's value is written where it lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Escape {
    /// As is: the value goes into a string that a serializer escapes (JSON) or into a field the
    /// HTML template escapes.
    None,
    /// HTML text or a quoted attribute value.
    Html,
    /// Markdown text, on one line, every ASCII punctuation character backslash-escaped.
    Markdown,
    /// Plain text, on one line: control characters (a terminal's escapes, line breaks) become
    /// U+FFFD, so a value can neither add lines nor drive the terminal that shows it.
    Text,
}

/// A `::NAME::` in `text` that is not a known token: the byte range of the whole `::NAME::` and
/// the name. Only upper-case names (`[A-Z][A-Z0-9_]*`) are tokens, so `std::vec` or an IPv6
/// address is plain text.
pub fn unknown_tokens(text: &str) -> Vec<(Range<usize>, String)> {
    scan(text)
        .filter(|(_, name)| !TOKENS.contains(name))
        .map(|(range, name)| (range, name.to_owned()))
        .collect()
}

/// Every token-shaped `::NAME::` in `text`, in order.
fn scan(text: &str) -> impl Iterator<Item = (Range<usize>, &str)> {
    let bytes = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while let Some(found) = text.get(at..).and_then(|rest| rest.find("::")) {
            let start = at + found;
            let name_start = start + 2;
            let len = bytes[name_start..]
                .iter()
                .take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || **b == b'_')
                .count();
            let name_end = name_start + len;
            let shaped = len > 0
                && bytes[name_start].is_ascii_uppercase()
                && bytes.get(name_end..name_end + 2) == Some(b"::");
            if shaped {
                at = name_end + 2;
                return Some((start..name_end + 2, &text[name_start..name_end]));
            }
            at = start + 1;
        }
        None
    })
}

/// `text` with every known token replaced by its value, escaped as `escape` says. Unknown
/// token-shaped text is left as written (a policy with one does not load).
pub fn expand(text: &str, values: &TokenValues<'_>, escape: Escape) -> String {
    let mut out = String::with_capacity(text.len() + 32);
    let mut last = 0;
    for (range, name) in scan(text) {
        let value: std::borrow::Cow<'_, str> = match name {
            "CLIENT_IP" => values.client_ip.into(),
            "RAY_ID" => values.ray_id.into(),
            "GEO" => values.geo.into(),
            "CODE" => values.code.to_string().into(),
            "RETRY_AFTER" => values
                .retry_after
                .map(|s| s.to_string())
                .unwrap_or_default()
                .into(),
            "ZONE" => values.zone.into(),
            "HOST" => values.host.into(),
            _ => continue,
        };
        out.push_str(&text[last..range.start]);
        escape_into(&mut out, &value, escape);
        last = range.end;
    }
    out.push_str(&text[last..]);
    out
}

/// Appends `value` escaped for `escape`.
pub fn escape_into(out: &mut String, value: &str, escape: Escape) {
    match escape {
        Escape::None => out.push_str(value),
        Escape::Html => {
            for c in value.chars() {
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
        Escape::Markdown => markdown_text(out, value),
        Escape::Text => {
            for c in value.chars() {
                let breaks = c.is_control() || c == '\u{2028}' || c == '\u{2029}';
                out.push(if breaks {
                    char::REPLACEMENT_CHARACTER
                } else {
                    c
                });
            }
        }
    }
}

/// Markdown text that reads back as `value` and adds no structure: control characters and line
/// breaks (including NEL, LS and PS) become spaces, so the value stays inside its line, and
/// every ASCII punctuation character is backslash-escaped (CommonMark allows the escape before
/// any of them), so it cannot start a heading, list, quote, fence, link, emphasis or HTML.
pub fn markdown_text(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => out.push(' '),
            c if c.is_ascii_punctuation() => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
}

/// Operator text shown literally in Markdown: each line escaped as [`markdown_text`], line
/// breaks kept (blank lines still separate paragraphs).
pub(crate) fn markdown_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.lines().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        markdown_text(&mut out, line);
    }
    out
}

/// `text` with its tokens as Markdown (values escaped), for Markdown the operator wrote.
pub(crate) fn expand_markdown(text: &str, values: &TokenValues<'_>) -> String {
    expand(text, values, Escape::Markdown)
}

/// Writes a short description of every token, for messages.
pub fn token_list() -> String {
    let mut out = String::new();
    for (i, name) in TOKENS.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "::{name}::");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> TokenValues<'static> {
        TokenValues {
            client_ip: "192.0.2.7",
            ray_id: "9d99a39dc992d168",
            geo: "FR",
            code: 1015,
            retry_after: Some(30),
            zone: "example.com",
            host: "Example.com:8080",
        }
    }

    #[test]
    fn known_tokens_expand() {
        let text = "::CLIENT_IP:: ::RAY_ID:: ::GEO:: ::CODE:: ::RETRY_AFTER:: ::ZONE:: ::HOST::";
        assert_eq!(
            expand(text, &values(), Escape::None),
            "192.0.2.7 9d99a39dc992d168 FR 1015 30 example.com Example.com:8080"
        );
        assert!(unknown_tokens(text).is_empty());
    }

    #[test]
    fn unknown_tokens_are_found_and_plain_colons_are_text() {
        let text = "a ::FOO:: b std::vec::Vec 2001:db8::1 ::lower:: ::A_1:: ::RAY_ID::";
        let unknown = unknown_tokens(text);
        assert_eq!(
            unknown,
            vec![(2..9, "FOO".to_owned()), (48..55, "A_1".to_owned())]
        );
        assert_eq!(&text[2..9], "::FOO::");
        assert!(expand(text, &values(), Escape::None).ends_with("9d99a39dc992d168"));
        // Adjacent tokens, and a token after a lone colon.
        assert_eq!(
            expand(":::CODE::::CODE::", &values(), Escape::None),
            ":10151015"
        );
    }

    #[test]
    fn values_are_escaped_for_their_place() {
        let v = TokenValues {
            host: "<b>\"x\" & 'y'\n# z",
            ..values()
        };
        assert_eq!(
            expand("h=::HOST::", &v, Escape::Html),
            "h=&lt;b&gt;&quot;x&quot; &amp; &#39;y&#39;\n# z"
        );
        assert_eq!(
            expand("h=::HOST::", &v, Escape::Markdown),
            "h=\\<b\\>\\\"x\\\" \\& \\'y\\' \\# z"
        );
        let v = TokenValues {
            host: "a\u{1b}[2J\r\nb\u{2028}<c>",
            ..values()
        };
        assert_eq!(
            expand("h=::HOST::\n", &v, Escape::Text),
            "h=a\u{fffd}[2J\u{fffd}\u{fffd}b\u{fffd}<c>\n"
        );
    }
}

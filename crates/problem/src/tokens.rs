//! `::NAME::` tokens in an operator's error content, and the escaping of their values for the
//! place each lands in.
//!
//! Token values come from the request (the Host is whatever the client sent), so a value is
//! never inserted raw: it is escaped for the format around it, and in Markdown it is kept on one
//! line so that it cannot open a block (a heading, a list, a fence, the frontmatter's `---`).

use std::fmt::Write as _;
use std::ops::Range;
use std::sync::LazyLock;

use memchr::memmem;

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

/// The searcher for `::`, the start of every token: built once, it skips a page's single colons
/// (CSS, URLs) in bulk.
static COLONS: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new("::"));

/// Where the first `::` in `text` starts. A short text (a title, a JSON member) is searched in
/// place, which costs less than setting up a search; a long one (a page, whose CSS may hold
/// hundreds of single colons) with [`COLONS`].
fn find_colons(text: &[u8]) -> Option<usize> {
    if text.len() >= 256 {
        return COLONS.find(text);
    }
    // Looks at every second byte: when it is not a colon, no pair starts there or just before.
    let mut i = 0;
    while i + 1 < text.len() {
        if text[i + 1] != b':' {
            i += 2;
        } else if text[i] == b':' {
            return Some(i);
        } else {
            i += 1;
        }
    }
    None
}

/// Every token-shaped `::NAME::` in `text`, in order.
fn scan(text: &str) -> impl Iterator<Item = (Range<usize>, &str)> {
    let bytes = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while let Some(found) = bytes.get(at..).and_then(find_colons) {
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
    expand_into(&mut out, text, values, escape);
    out
}

/// Appends `text` with its tokens expanded, as [`expand`] returns it.
pub(crate) fn expand_into(out: &mut String, text: &str, values: &TokenValues<'_>, escape: Escape) {
    expand_with(text, values, |piece| match piece {
        Piece::Text(text) => out.push_str(text),
        Piece::Value(value) => escape_into(out, value, escape),
        // Digits need no escaping in any format.
        Piece::Number(n) => push_number(out, n),
    });
}

/// A piece of expanded text: the operator's own text, a token's value (to escape), or a number
/// (the code or the wait, which no format escapes).
pub(crate) enum Piece<'t> {
    Text(&'t str),
    Value(&'t str),
    Number(u32),
}

/// Hands `text` to `emit` piece by piece, with every known token replaced by its value.
pub(crate) fn expand_with<'t>(
    text: &'t str,
    values: &TokenValues<'t>,
    mut emit: impl FnMut(Piece<'t>),
) {
    let mut last = 0;
    for (range, name) in scan(text) {
        let value = match name {
            "CLIENT_IP" => Piece::Value(values.client_ip),
            "RAY_ID" => Piece::Value(values.ray_id),
            "GEO" => Piece::Value(values.geo),
            "CODE" => Piece::Number(u32::from(values.code)),
            "RETRY_AFTER" => match values.retry_after {
                Some(seconds) => Piece::Number(seconds),
                None => Piece::Value(""),
            },
            "ZONE" => Piece::Value(values.zone),
            "HOST" => Piece::Value(values.host),
            _ => continue,
        };
        if last < range.start {
            emit(Piece::Text(&text[last..range.start]));
        }
        emit(value);
        last = range.end;
    }
    if last < text.len() {
        emit(Piece::Text(&text[last..]));
    }
}

/// Appends the decimal digits of `n`.
pub(crate) fn push_number(out: &mut String, n: u32) {
    out.push_str(decimal(n, &mut [0; 10]));
}

/// The decimal digits of `n`, written at the end of `buf`.
pub(crate) fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &str {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // ASCII digits only, so this never falls back.
    std::str::from_utf8(&buf[at..]).unwrap_or_default()
}

/// Appends `value` escaped for `escape`.
pub fn escape_into(out: &mut String, value: &str, escape: Escape) {
    match escape {
        Escape::None => out.push_str(value),
        Escape::Html => replace_chars(out, value, |c| match c {
            '&' => Some(Swap::With("&amp;")),
            '<' => Some(Swap::With("&lt;")),
            '>' => Some(Swap::With("&gt;")),
            '"' => Some(Swap::With("&quot;")),
            '\'' => Some(Swap::With("&#39;")),
            _ => None,
        }),
        Escape::Markdown => markdown_text(out, value),
        Escape::Text => replace_chars(out, value, |c| {
            line_break_or_control(c).then_some(Swap::With("\u{fffd}"))
        }),
    }
}

/// What [`replace_chars`] does with one character.
enum Swap {
    /// Writes this instead of the character.
    With(&'static str),
    /// Writes a backslash, then the character.
    Backslash,
}

/// Appends `value` with the characters `swap` names replaced, copying the runs in between
/// whole rather than one character at a time.
fn replace_chars(out: &mut String, value: &str, swap: impl Fn(char) -> Option<Swap>) {
    out.reserve(value.len());
    let mut run = 0;
    for (i, c) in value.char_indices() {
        let Some(swap) = swap(c) else { continue };
        out.push_str(&value[run..i]);
        match swap {
            Swap::With(text) => {
                out.push_str(text);
                run = i + c.len_utf8();
            }
            Swap::Backslash => {
                out.push('\\');
                // The character itself starts the next run.
                run = i;
            }
        }
    }
    out.push_str(&value[run..]);
}

/// A control character or a line break (including NEL, LS and PS).
fn line_break_or_control(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Markdown text that reads back as `value` and adds no structure: control characters and line
/// breaks (including NEL, LS and PS) become spaces, so the value stays inside its line, and
/// every ASCII punctuation character is backslash-escaped (CommonMark allows the escape before
/// any of them), so it cannot start a heading, list, quote, fence, link, emphasis or HTML.
pub fn markdown_text(out: &mut String, value: &str) {
    replace_chars(out, value, |c| {
        if c.is_ascii_punctuation() {
            Some(Swap::Backslash)
        } else if line_break_or_control(c) {
            Some(Swap::With(" "))
        } else {
            None
        }
    });
}

/// Appends operator text shown literally in Markdown: each line escaped as [`markdown_text`], line
/// breaks kept (blank lines still separate paragraphs).
pub(crate) fn markdown_literal(out: &mut String, text: &str) {
    for (i, line) in text.lines().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        markdown_text(out, line);
    }
}

/// Appends `text` with its tokens as Markdown (values escaped), for Markdown the operator wrote.
pub(crate) fn expand_markdown(out: &mut String, text: &str, values: &TokenValues<'_>) {
    expand_into(out, text, values, Escape::Markdown);
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
    use proptest::prelude::*;

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
    /// The escaping as first written, one character at a time: the run-copying code must agree.
    fn reference_escape(value: &str, escape: Escape) -> String {
        let mut out = String::new();
        for c in value.chars() {
            let breaks = c.is_control() || c == '\u{2028}' || c == '\u{2029}';
            match escape {
                Escape::None => out.push(c),
                Escape::Html => match c {
                    '&' => out.push_str("&amp;"),
                    '<' => out.push_str("&lt;"),
                    '>' => out.push_str("&gt;"),
                    '"' => out.push_str("&quot;"),
                    '\'' => out.push_str("&#39;"),
                    c => out.push(c),
                },
                Escape::Markdown if breaks => out.push(' '),
                Escape::Markdown if c.is_ascii_punctuation() => {
                    out.push('\\');
                    out.push(c);
                }
                Escape::Markdown => out.push(c),
                Escape::Text if breaks => out.push(char::REPLACEMENT_CHARACTER),
                Escape::Text => out.push(c),
            }
        }
        out
    }

    /// Token expansion as first written: a substring search for `::`, values formatted.
    fn reference_expand(text: &str, values: &TokenValues<'_>, escape: Escape) -> String {
        let bytes = text.as_bytes();
        let mut out = String::new();
        let (mut at, mut last) = (0, 0);
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
            if !shaped {
                at = start + 1;
                continue;
            }
            at = name_end + 2;
            let value = match &text[name_start..name_end] {
                "CLIENT_IP" => values.client_ip.to_owned(),
                "RAY_ID" => values.ray_id.to_owned(),
                "GEO" => values.geo.to_owned(),
                "CODE" => values.code.to_string(),
                "RETRY_AFTER" => values
                    .retry_after
                    .map(|s| s.to_string())
                    .unwrap_or_default(),
                "ZONE" => values.zone.to_owned(),
                "HOST" => values.host.to_owned(),
                _ => continue,
            };
            out.push_str(&text[last..start]);
            out.push_str(&reference_escape(&value, escape));
            last = at;
        }
        out.push_str(&text[last..]);
        out
    }

    /// Text made mostly of what matters here: colons, token names, punctuation, controls, line
    /// breaks and multi-byte characters.
    fn tricky_text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("::".to_owned()),
            Just(":".to_owned()),
            prop::sample::select(TOKENS).prop_map(|t| format!("::{t}::")),
            prop::sample::select(TOKENS).prop_map(str::to_owned),
            Just("::FOO::".to_owned()),
            "[ -~]{0,4}",
            "[\\x{0}-\\x{1f}\\x{7f}-\\x{a0}\\x{2028}\\x{2029}é€😀]{0,3}",
        ];
        prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #[test]
        fn escaping_agrees_with_the_reference(value in tricky_text()) {
            for escape in [Escape::None, Escape::Html, Escape::Markdown, Escape::Text] {
                let mut out = String::from("x");
                escape_into(&mut out, &value, escape);
                prop_assert_eq!(&out[1..], reference_escape(&value, escape), "{:?}", escape);
            }
        }

        #[test]
        fn expansion_agrees_with_the_reference(
            text in tricky_text(),
            host in tricky_text(),
            code in any::<u16>(),
            retry_after in prop::option::of(any::<u32>()),
        ) {
            let v = TokenValues { host: &host, code, retry_after, ..values() };
            // Short texts are searched in place, long ones (CSS-like, many single colons) with
            // the pair searcher.
            let long = format!("{}{text}:", "a:b;".repeat(64));
            for escape in [Escape::None, Escape::Html, Escape::Markdown, Escape::Text] {
                for text in [&text, &long] {
                    prop_assert_eq!(
                        expand(text, &v, escape),
                        reference_expand(text, &v, escape),
                        "{:?}", escape
                    );
                }
            }
        }
    }
}

//! The Markdown body: YAML frontmatter with the machine fields, then the prose sections.

use std::fmt::Write as _;

use crate::custom::Custom;
use crate::problem::{Branding, Prose, View};
use crate::tokens::{Escape, TokenValues, expand_into, expand_markdown, markdown_literal};

pub(crate) fn render(
    view: &View<'_>,
    branding: &Branding,
    custom: &Custom,
    tokens: &TokenValues<'_>,
    prose: impl FnOnce() -> Prose,
) -> Vec<u8> {
    let problem = view.problem;
    let entry = problem.entry;
    let mut out = String::with_capacity(768 + problem.zone.len());
    // `write!` to a String cannot fail; the results are ignored for that reason.
    out.push_str("---\n");
    let _ = writeln!(out, "error_code: {}", entry.code);
    let _ = writeln!(out, "error_name: {}", entry.error_name);
    let _ = writeln!(out, "error_category: {}", entry.error_category);
    let _ = writeln!(out, "status: {}", view.status);
    out.push_str("ray_id: ");
    yaml_scalar(&mut out, problem.ray_id);
    // Quoted on purpose: a plain `2026-03-09T11:11:28Z` is a timestamp in YAML 1.1, so
    // PyYAML's safe_load (what agents use) would hand back a datetime object rather than the
    // string the JSON body carries. Two quote characters buy the same type in every parser.
    let _ = write!(
        out,
        "\ntimestamp: \"{}\"\nzone: ",
        problem.timestamp_string()
    );
    yaml_scalar(&mut out, problem.zone);
    if entry.from_origin {
        out.push_str("\ncloudflare_error: false\nsource: origin\n");
    } else {
        out.push_str("\ncloudflare_error: true\n");
    }
    let _ = writeln!(out, "retryable: {}", view.retryable);
    if let Some(seconds) = view.retry_after {
        let _ = writeln!(out, "retry_after: {seconds}");
    }
    let _ = writeln!(
        out,
        "owner_action_required: {}",
        entry.owner_action_required
    );
    out.push_str("---\n\n");
    // The operator's own body, if the rule gives one: its Markdown with token values escaped, or
    // its text shown literally. The frontmatter above is the edge's either way.
    if let Some(markdown) = &custom.markdown {
        expand_markdown(&mut out, markdown, tokens);
        if !out.ends_with('\n') {
            out.push('\n');
        }
        return out.into_bytes();
    }
    if let Some(text) = &custom.text {
        let mut expanded = String::with_capacity(text.len() + 32);
        expand_into(&mut expanded, text, tokens, Escape::None);
        markdown_literal(&mut out, &expanded);
        out.push('\n');
        return out.into_bytes();
    }
    // The catalog's text and the operator's are trusted; a value from the request reaches the
    // prose only through a token, escaped as Markdown on one line, so a client cannot give the
    // prose structure.
    let prose = prose();
    let _ = write!(
        out,
        "# {}\n\n## What Happened\n\n{}\n\n## What You Should Do\n\n{}\n\n---\n\n{}\n",
        prose.wire_title,
        prose.detail,
        prose.guidance,
        branding.footer_line(),
    );
    out.into_bytes()
}

/// Appends `value` as a YAML scalar that every YAML 1.1 or 1.2 parser reads back as the same
/// string: plain when provably safe (keeps hostnames as Cloudflare shows them), otherwise
/// double-quoted with escapes.
pub fn yaml_scalar(out: &mut String, value: &str) {
    if is_plain_safe(value) {
        out.push_str(value);
        return;
    }
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            // Outside YAML's printable set, or a line break in YAML 1.1 (NEL, LS, PS), or a BOM.
            c if needs_escape(c) => {
                let n = u32::from(c);
                let _ = if n <= 0xFF {
                    write!(out, "\\x{n:02X}")
                } else if n <= 0xFFFF {
                    write!(out, "\\u{n:04X}")
                } else {
                    write!(out, "\\U{n:08X}")
                };
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn needs_escape(c: char) -> bool {
    matches!(
        c,
        '\u{0}'..='\u{1F}'
            | '\u{7F}'..='\u{9F}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{FEFF}'
            | '\u{FFFE}'
            | '\u{FFFF}'
    )
}

/// A conservative allow-list for plain scalars: `[a-z0-9][a-z0-9.-]*` (no indicator, no space,
/// no colon or hash), not a YAML 1.1 bool or null word, and not something a YAML 1.1 or 1.2
/// resolver could read as a number or timestamp. Anything else is quoted, which is always safe.
fn is_plain_safe(s: &str) -> bool {
    let bytes = s.as_bytes();
    let Some(&first) = bytes.first() else {
        return false; // empty reads back as null
    };
    // Hostnames are at most 253 bytes; longer values are quoted without a second thought.
    if bytes.len() > 253 || !(first.is_ascii_lowercase() || first.is_ascii_digit()) {
        return false;
    }
    if !bytes
        .iter()
        .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return false;
    }
    // YAML 1.1 booleans and nulls (the lowercase spellings; uppercase never gets here).
    if matches!(
        s,
        "y" | "n" | "yes" | "no" | "on" | "off" | "true" | "false" | "null"
    ) {
        return false;
    }
    if first.is_ascii_digit() {
        // Numbers and timestamps only use digits, `.`, `-`, and the letters of `0x`/`0o`/`0b`
        // prefixes, hex digits after `0x`, exponents `e`, and timestamps' `t`/`z`. A digit-led
        // value is safe only with a letter none of those forms can contain, and no `x` (which
        // would make a-f hex digits).
        let has_telling_letter = bytes.iter().any(|&b| {
            b.is_ascii_lowercase() && !matches!(b, b'b' | b'e' | b'o' | b't' | b'x' | b'z')
        });
        return has_telling_letter && !bytes.contains(&b'x');
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(s: &str) -> String {
        let mut out = String::new();
        yaml_scalar(&mut out, s);
        out
    }

    #[test]
    fn plain_when_safe() {
        for s in [
            "example.com",
            "blog.example.co.uk",
            "xn--bcher-kva.example",
            "9d99a39dc992d168",
            "a28817ceee58faca",
            "localhost",
            "nan",
            "inf",
        ] {
            assert_eq!(scalar(s), s);
        }
    }

    #[test]
    fn quoted_when_not() {
        for s in [
            "",
            "yes",
            "no",
            "on",
            "off",
            "y",
            "n",
            "true",
            "null",
            "1e3",
            "0x1f",
            "0o17",
            "0b101",
            "1234567890123456",
            "12e45",
            "2026-03-09",
            "2026-03-09t11.11z",
            "1.2.3.4",
            "1.5",
            "Example.com",
            "a: b",
            "-x",
            "a b",
            "é",
            "1_000",
            "~",
            ".inf",
            "-1",
        ] {
            assert!(scalar(s).starts_with('"'), "{s:?} -> {}", scalar(s));
        }
        assert_eq!(
            scalar("a\"b\\c\nd\r\te\u{7}\u{85}\u{2028}\u{1F600}"),
            "\"a\\\"b\\\\c\\nd\\r\\te\\x07\\x85\\u2028\u{1F600}\""
        );
    }
}

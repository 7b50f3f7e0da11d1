//! Lexer for rule expressions: identifiers, literals (strings, integers, IPs/CIDRs) and operators.

use std::ops::Range;

use super::error::ExprError;

/// One token and its byte span in the expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub kind: Tok,
    pub span: Range<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// A field, function or word operator: `http.host`, `lower`, `and`, `eq`, ...
    Ident(String),
    Str(String),
    Int(i64),
    /// An IP address or CIDR as written; checked by the parser.
    Ip(String),
    LParen,
    RParen,
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Comma,
    EqEq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    Tilde,
    Bang,
    AndAnd,
    OrOr,
    XorXor,
    Eof,
}

/// Splits an expression into tokens, ending with `Eof`.
pub(crate) fn lex(src: &str) -> Result<Vec<Token>, ExprError> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let two = |s: &[u8; 2]| bytes.get(i..i + 2) == Some(&s[..]);
        let (kind, len) = if two(b"==") {
            (Tok::EqEq, 2)
        } else if two(b"!=") {
            (Tok::NotEq, 2)
        } else if two(b"<=") {
            (Tok::Le, 2)
        } else if two(b">=") {
            (Tok::Ge, 2)
        } else if two(b"&&") {
            (Tok::AndAnd, 2)
        } else if two(b"||") {
            (Tok::OrOr, 2)
        } else if two(b"^^") {
            (Tok::XorXor, 2)
        } else if two(b"::") {
            let end = scan_ip(bytes, i);
            (Tok::Ip(src[i..end].to_owned()), end - i)
        } else {
            match c {
                b'(' => (Tok::LParen, 1),
                b')' => (Tok::RParen, 1),
                b'{' => (Tok::LBrace, 1),
                b'}' => (Tok::RBrace, 1),
                b'[' => (Tok::LBracket, 1),
                b']' => (Tok::RBracket, 1),
                b',' => (Tok::Comma, 1),
                b'<' => (Tok::Lt, 1),
                b'>' => (Tok::Gt, 1),
                b'~' => (Tok::Tilde, 1),
                b'!' => (Tok::Bang, 1),
                b'"' => {
                    let (s, end) = lex_string(src, i)?;
                    (Tok::Str(s), end - i)
                }
                b'0'..=b'9' => {
                    let end = scan_ip(bytes, i);
                    let text = &src[i..end];
                    if text.contains(['.', ':']) {
                        (Tok::Ip(text.to_owned()), end - i)
                    } else if text.bytes().all(|b| b.is_ascii_digit()) {
                        let n = text.parse::<i64>().map_err(|_| {
                            ExprError::new(i..end, format!("integer `{text}` is out of range"))
                        })?;
                        (Tok::Int(n), end - i)
                    } else {
                        return Err(ExprError::new(i..end, format!("`{text}` is not a number")));
                    }
                }
                c if c.is_ascii_alphabetic() || c == b'_' => {
                    let mut end = i;
                    while end < bytes.len()
                        && (bytes[end].is_ascii_alphanumeric()
                            || bytes[end] == b'_'
                            || bytes[end] == b'.')
                    {
                        end += 1;
                    }
                    // `fe80::1` starts like a word: an all-hex word followed by `:` is an IPv6 address.
                    if bytes.get(end) == Some(&b':')
                        && src[i..end].bytes().all(|b| b.is_ascii_hexdigit())
                    {
                        let end = scan_ip(bytes, i);
                        (Tok::Ip(src[i..end].to_owned()), end - i)
                    } else {
                        (Tok::Ident(src[i..end].to_owned()), end - i)
                    }
                }
                _ => {
                    let ch = src[i..].chars().next().unwrap_or('?');
                    return Err(ExprError::new(
                        i..i + ch.len_utf8(),
                        format!("unexpected character `{ch}`"),
                    ));
                }
            }
        };
        i += len;
        out.push(Token {
            kind,
            span: start..i,
        });
    }
    out.push(Token {
        kind: Tok::Eof,
        span: src.len()..src.len(),
    });
    Ok(out)
}

/// The end of an address-like run: hex digits, `.`, `:` and one `/len`.
fn scan_ip(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && (bytes[i].is_ascii_hexdigit() || bytes[i] == b'.' || bytes[i] == b':')
    {
        i += 1;
    }
    if i < bytes.len() && bytes[i] == b'/' {
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
    }
    i
}

/// A double-quoted string with `\"`, `\\` and `\n`-style escapes; returns the value and the end.
fn lex_string(src: &str, start: usize) -> Result<(String, usize), ExprError> {
    let mut out = String::new();
    let mut chars = src[start + 1..].char_indices();
    while let Some((off, ch)) = chars.next() {
        let at = start + 1 + off;
        match ch {
            '"' => return Ok((out, at + 1)),
            '\\' => match chars.next() {
                Some((_, '"')) => out.push('"'),
                Some((_, '\\')) => out.push('\\'),
                Some((_, 'n')) => out.push('\n'),
                Some((_, 't')) => out.push('\t'),
                Some((_, 'r')) => out.push('\r'),
                Some((o2, other)) => {
                    return Err(ExprError::new(
                        at..start + 1 + o2 + other.len_utf8(),
                        format!("unknown escape `\\{other}` (use `\\\\` for a backslash)"),
                    ));
                }
                None => break,
            },
            c => out.push(c),
        }
    }
    Err(ExprError::new(start..src.len(), "unterminated string"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<Tok> {
        lex(s).unwrap().into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn tokens() {
        assert_eq!(
            kinds(r#"http.host == "a\"b" && ip.src in {10.0.0.0/8 fe80::/10 ::1} || 42"#),
            vec![
                Tok::Ident("http.host".into()),
                Tok::EqEq,
                Tok::Str("a\"b".into()),
                Tok::AndAnd,
                Tok::Ident("ip.src".into()),
                Tok::Ident("in".into()),
                Tok::LBrace,
                Tok::Ip("10.0.0.0/8".into()),
                Tok::Ip("fe80::/10".into()),
                Tok::Ip("::1".into()),
                Tok::RBrace,
                Tok::OrOr,
                Tok::Int(42),
                Tok::Eof,
            ]
        );
    }

    #[test]
    fn errors_have_spans() {
        assert_eq!(lex("a = 1").unwrap_err().span, 2..3);
        assert_eq!(lex("\"abc").unwrap_err().span, 0..4);
        assert_eq!(lex("99999999999999999999").unwrap_err().span, 0..20);
        assert_eq!(lex("é").unwrap_err().span, 0..2);
    }
}

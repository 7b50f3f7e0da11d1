//! The decoding functions of the rules language: what a rule needs to see through the encodings
//! an attacker wraps a payload in (`%3Cscript%3E`, `%253C`, `%u003C`, Base64).
//!
//! Every function is total: it never fails and never panics on any input. Decoded bytes that are
//! not UTF-8 read as U+FFFD, like every other field (see `Cx`). Each borrows its input unchanged
//! when there is nothing to decode, so a benign request costs no allocation.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use super::compile::UrlDecodeOptions;

/// Most decoding passes of `url_decode(s, "r")`. Every pass that changes the text shortens it, so
/// the loop ends anyway; the bound keeps the worst case linear in the input (an 8 KiB
/// `%25252525…` would otherwise take thousands of passes). No origin decodes more often than this.
pub(crate) const MAX_URL_DECODE_PASSES: usize = 16;

/// `url_decode`: `%XX` becomes the byte XX and `+` a space (as in a query string); with `u`,
/// `%uXXXX` becomes that code point. A `%` that starts no valid escape stays as it is. With `r`,
/// decodes again until nothing changes (at most [`MAX_URL_DECODE_PASSES`] times).
pub(crate) fn url_decode(s: Cow<'_, str>, options: UrlDecodeOptions) -> Cow<'_, str> {
    let passes = if options.recursive {
        MAX_URL_DECODE_PASSES
    } else {
        1
    };
    let mut text = s;
    for _ in 0..passes {
        match url_decode_once(&text, options.unicode) {
            Some(decoded) => text = Cow::Owned(decoded),
            None => break,
        }
    }
    text
}

/// One decoding pass; `None` when the text holds nothing to decode.
fn url_decode_once(s: &str, unicode: bool) -> Option<String> {
    let bytes = s.as_bytes();
    if !bytes.iter().any(|&b| b == b'%' || b == b'+') {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => {
                if let Some(byte) = hex_byte(bytes.get(i + 1..i + 3)) {
                    out.push(byte);
                    i += 3;
                } else if let Some(ch) = unicode
                    .then(|| unicode_escape(bytes.get(i + 1..i + 6)))
                    .flatten()
                {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                    i += 6;
                } else {
                    out.push(b'%');
                    i += 1;
                }
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    let decoded = String::from_utf8_lossy(&out).into_owned();
    // A `%` that starts no escape stays: only a changed text counts as decoded.
    (decoded != s).then_some(decoded)
}

fn hex_byte(pair: Option<&[u8]>) -> Option<u8> {
    match pair? {
        [hi, lo] => Some(hex_digit(*hi)? << 4 | hex_digit(*lo)?),
        _ => None,
    }
}

/// `uXXXX` (after the `%`): a code point; a lone surrogate reads as U+FFFD.
fn unicode_escape(rest: Option<&[u8]>) -> Option<char> {
    let [u, digits @ ..] = rest? else {
        return None;
    };
    if !u.eq_ignore_ascii_case(&b'u') {
        return None;
    }
    let mut n = 0u32;
    for &d in digits {
        n = n << 4 | u32::from(hex_digit(d)?);
    }
    Some(char::from_u32(n).unwrap_or(char::REPLACEMENT_CHARACTER))
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Base64 as clients send it: the standard or URL-safe alphabet, padded or not.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// `decode_base64`: the decoded text, or "" when the input is not Base64 (a rule comparing it
/// then simply does not match). Surrounding whitespace is ignored.
pub(crate) fn base64(s: &str) -> Cow<'static, str> {
    let s = s.trim();
    if s.is_empty() {
        return Cow::Borrowed("");
    }
    let standard: Cow<'_, str> = if s.contains(['-', '_']) {
        Cow::Owned(s.replace('-', "+").replace('_', "/"))
    } else {
        Cow::Borrowed(s)
    };
    match BASE64.decode(standard.as_bytes()) {
        Ok(bytes) => Cow::Owned(String::from_utf8_lossy(&bytes).into_owned()),
        Err(_) => Cow::Borrowed(""),
    }
}

/// `remove_bytes`: the text without any of the characters in `set`.
pub(crate) fn remove_chars<'a>(s: Cow<'a, str>, set: &str) -> Cow<'a, str> {
    if set.is_empty() || !s.contains(|c| set.contains(c)) {
        return s;
    }
    Cow::Owned(s.chars().filter(|c| !set.contains(*c)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str, opts: &str) -> String {
        let options = UrlDecodeOptions {
            recursive: opts.contains('r'),
            unicode: opts.contains('u'),
        };
        url_decode(Cow::Borrowed(s), options).into_owned()
    }

    #[test]
    fn url_decoding() {
        assert_eq!(dec("John%20Doe+Jr", ""), "John Doe Jr");
        assert_eq!(dec("%3Cscript%3e", ""), "<script>");
        assert_eq!(dec("%2520", ""), "%20");
        assert_eq!(dec("%2520", "r"), " ");
        assert_eq!(dec("%25252525252e", "r"), ".");
        assert_eq!(dec("%u003Cscript", ""), "%u003Cscript");
        assert_eq!(dec("%u003Cscript", "u"), "<script");
        assert_eq!(dec("%U2601", "u"), "\u{2601}");
        assert_eq!(dec("%uD800", "u"), "\u{FFFD}");
        assert_eq!(dec("100%", ""), "100%");
        assert_eq!(dec("%zz%4", "r"), "%zz%4");
        assert_eq!(dec("%E4%BD%A0", ""), "\u{4F60}");
        // Bytes that are not UTF-8 stay visible as U+FFFD, the text around them intact.
        assert_eq!(dec("sql%FFmap%20x", ""), "sql\u{FFFD}map x");
        assert!(matches!(
            url_decode(Cow::Borrowed("/plain/path"), UrlDecodeOptions::default()),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn recursion_is_bounded() {
        let deep = format!("{}2e", "%25".repeat(100));
        let once = dec(&deep, "r");
        assert!(once.starts_with('%') && once.len() < deep.len(), "{once}");
    }

    #[test]
    fn base64_decoding() {
        assert_eq!(base64("PHNjcmlwdD4="), "<script>");
        assert_eq!(base64("PHNjcmlwdD4"), "<script>");
        assert_eq!(base64(" aGk_Pz8- "), "hi???>");
        assert_eq!(base64("not base64!"), "");
        assert_eq!(base64(""), "");
        assert_eq!(base64("/w=="), "\u{FFFD}");
    }

    #[test]
    fn removing_characters() {
        assert_eq!(remove_chars(Cow::Borrowed("un/**/ion"), "/*"), "union");
        assert!(matches!(
            remove_chars(Cow::Borrowed("plain"), "/*"),
            Cow::Borrowed("plain")
        ));
        assert_eq!(remove_chars(Cow::Borrowed("a\0b"), "\0"), "ab");
    }

    proptest::proptest! {
        #[test]
        fn decoders_are_total(s in "\\PC*", opts in "[ru]{0,2}") {
            let _ = dec(&s, &opts);
            let _ = base64(&s);
            let _ = remove_chars(Cow::Borrowed(&s), "%+");
        }

        #[test]
        fn decoding_an_encoded_text_gives_it_back(s in "\\PC{0,64}") {
            let encoded: String = percent_encoding::utf8_percent_encode(
                &s,
                percent_encoding::NON_ALPHANUMERIC,
            )
            .collect();
            proptest::prop_assert_eq!(dec(&encoded, ""), s);
        }
    }
}

//! The request path as rules read it: normalised the way an origin resolves it, so that
//! `/%61dmin`, `/x/../admin`, `//admin` and `\admin` all meet a rule written for `/admin`.
//!
//! The normalisation is RFC 3986 §6.2.2 plus what common servers also accept:
//! - percent-escapes of unreserved characters (`A-Z a-z 0-9 - . _ ~`) are decoded, other escapes
//!   keep their meaning and get upper-case hex (`%2f` → `%2F`, never `/`);
//! - `\` becomes `/` (IIS and some frameworks treat them alike), runs of `/` become one;
//! - `.` and `..` segments are removed (§5.2.4), never climbing above the root.
//!
//! The origin still receives the path exactly as sent; `raw.http.request.uri.path` gives rules
//! the unnormalised text.

use std::borrow::Cow;

/// The normalised path; borrowed when the path is already in normal form (the usual case).
pub(crate) fn normalized_path(raw: &str) -> Cow<'_, str> {
    if !raw.starts_with('/') || !needs_work(raw.as_bytes()) {
        return Cow::Borrowed(raw);
    }
    // Pass 1: escapes and separators.
    let bytes = raw.as_bytes();
    let mut text = String::with_capacity(raw.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%'
            && let Some(byte) = hex_pair(bytes.get(i + 1..i + 3))
        {
            if is_unreserved(byte) {
                text.push(char::from(byte));
            } else {
                text.push('%');
                text.push_str(&format!("{byte:02X}"));
            }
            i += 3;
            continue;
        }
        let ch_len = utf8_len(b);
        let end = (i + ch_len).min(bytes.len());
        match raw.get(i..end) {
            Some("\\") => text.push('/'),
            Some(s) => text.push_str(s),
            // Not at a character boundary cannot happen for a &str walked by lead bytes; be safe.
            None => text.push(char::REPLACEMENT_CHARACTER),
        }
        i = end;
    }
    // Pass 2: segments, with `.`/`..` resolved and empty segments (from `//`) dropped.
    let mut out: Vec<&str> = Vec::new();
    let mut trailing_slash = text.ends_with('/');
    for segment in text.split('/').skip(1) {
        match segment {
            "" => {}
            "." => trailing_slash = true,
            ".." => {
                out.pop();
                trailing_slash = true;
            }
            s => {
                out.push(s);
                trailing_slash = false;
            }
        }
    }
    if text.ends_with('/') {
        trailing_slash = true;
    }
    let mut path = String::with_capacity(text.len());
    for s in &out {
        path.push('/');
        path.push_str(s);
    }
    if trailing_slash || out.is_empty() {
        path.push('/');
    }
    if path == raw {
        Cow::Borrowed(raw)
    } else {
        Cow::Owned(path)
    }
}

/// Whether anything in the path may change under normalisation.
fn needs_work(b: &[u8]) -> bool {
    b.iter().enumerate().any(|(i, &c)| match c {
        b'%' | b'\\' => true,
        b'/' => matches!(b.get(i + 1), Some(b'/' | b'.')),
        _ => false,
    })
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex_pair(pair: Option<&[u8]>) -> Option<u8> {
    let [hi, lo] = pair? else {
        return None;
    };
    let digit = |d: u8| char::from(d).to_digit(16);
    u8::try_from(digit(*hi)? << 4 | digit(*lo)?).ok()
}

fn utf8_len(lead: u8) -> usize {
    match lead {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::normalized_path;
    use proptest::prelude::*;

    #[test]
    fn normal_forms() {
        for (raw, want) in [
            ("/admin", "/admin"),
            ("/%61dmin", "/admin"),
            ("/%2e%2e/admin", "/admin"),
            ("/x/../admin", "/admin"),
            ("/x/./admin/", "/x/admin/"),
            ("//admin", "/admin"),
            ("/\\admin", "/admin"),
            ("/a%2fb", "/a%2Fb"),
            ("/a%2Fb/..", "/"),
            ("/a/b/..", "/a/"),
            ("/../../etc/passwd", "/etc/passwd"),
            ("/%7Euser", "/~user"),
            ("/%zz", "/%zz"),
            ("/", "/"),
            ("*", "*"),
            ("/caf\u{e9}/./x", "/caf\u{e9}/x"),
        ] {
            assert_eq!(normalized_path(raw), want, "{raw}");
        }
        assert!(matches!(
            normalized_path("/a/b.png"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    proptest! {
        #[test]
        fn normalising_twice_changes_nothing(p in "/[a-z%2eEF./\\\\]{0,40}") {
            let once = normalized_path(&p).into_owned();
            prop_assert_eq!(normalized_path(&once).into_owned(), once.clone());
            prop_assert!(once.starts_with('/'));
        }
    }
}

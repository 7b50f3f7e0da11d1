//! The edge's challenge endpoints and what they receive.

use crate::Rejected;

/// Where the page posts its answer (`application/x-www-form-urlencoded`: `token`, `nonce`,
/// `return`). The edge answers `303 See Other` to `return` with the clearance's `Set-Cookie`, or
/// the challenge page again when the answer is refused.
pub const VERIFY_PATH: &str = "/cdn-cgi/challenge/verify";

/// Where the no-JavaScript fallback leads (`GET`, query `token` and `return`), after
/// [`crate::Settings::fallback_delay`]. The edge answers `303` to `return` with the clearance,
/// or, when it came too early, the page again with the seconds left.
pub const WAIT_PATH: &str = "/cdn-cgi/challenge/wait";

/// The longest form body or query the endpoints read: a token, a 20-digit nonce and a return
/// path of at most [`MAX_RETURN_LEN`] bytes, each percent-encoded at worst, fit.
pub const MAX_FORM_LEN: usize = 8 * 1024;

/// The longest return path kept; a longer request target returns to `/`.
pub const MAX_RETURN_LEN: usize = 2048;

/// The request target to return to, if it is a safe same-site path: it starts with one `/` (not
/// `//` or `/\`, which browsers read as another host), holds only visible ASCII (a request
/// target as received is ASCII), and is at most [`MAX_RETURN_LEN`] bytes. Anything else returns
/// to `/`: the edge never redirects off the site.
pub fn return_path(target: &str) -> Option<&str> {
    let bytes = target.as_bytes();
    let ok = bytes.first() == Some(&b'/')
        && !matches!(bytes.get(1), Some(b'/' | b'\\'))
        && bytes.len() <= MAX_RETURN_LEN
        && bytes.iter().all(|b| b.is_ascii_graphic());
    ok.then_some(target)
}

/// An answer posted to [`VERIFY_PATH`], or a [`WAIT_PATH`] query (whose `nonce` is empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// The challenge token.
    pub token: String,
    /// The answer, empty for the fallback.
    pub nonce: String,
    /// Where to send the visitor back: a checked [`return_path`], `/` when absent or unsafe.
    pub return_to: String,
}

impl Submission {
    /// Reads an `application/x-www-form-urlencoded` body or query. A field sent twice keeps its
    /// first value. Refused when larger than [`MAX_FORM_LEN`], not UTF-8 once decoded, or
    /// without a token.
    pub fn parse(form: &[u8]) -> Result<Submission, Rejected> {
        if form.len() > MAX_FORM_LEN {
            return Err(Rejected::Malformed);
        }
        let (mut token, mut nonce, mut return_to) = (None, None, None);
        for pair in form.split(|&b| b == b'&') {
            let (name, value) = match pair.iter().position(|&b| b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &b""[..]),
            };
            let slot = match name {
                b"token" => &mut token,
                b"nonce" => &mut nonce,
                b"return" => &mut return_to,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(percent_decode(value).ok_or(Rejected::Malformed)?);
            }
        }
        let token = token.filter(|t| !t.is_empty()).ok_or(Rejected::Malformed)?;
        let return_to = return_to
            .as_deref()
            .and_then(return_path)
            .unwrap_or("/")
            .to_owned();
        Ok(Submission {
            token,
            nonce: nonce.unwrap_or_default(),
            return_to,
        })
    }
}

/// Form decoding: `+` is a space, `%XX` a byte; a stray `%` is refused.
fn percent_decode(value: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while let Some(&b) = value.get(i) {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = value.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            _ => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Percent-encodes everything but RFC 3986's unreserved characters, for a query value.
pub(crate) fn percent_encode(value: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(value.len() * 3);
    for &b in value.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
    out
}

/// The fallback's link: [`WAIT_PATH`] with the token and the return path.
pub fn wait_url(token: &str, return_to: &str) -> String {
    format!(
        "{WAIT_PATH}?token={}&return={}",
        percent_encode(token),
        percent_encode(return_to)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_paths_stay_on_the_site() {
        assert_eq!(return_path("/a/b?c=d"), Some("/a/b?c=d"));
        assert_eq!(return_path("/"), Some("/"));
        for bad in [
            "",
            "//evil.example/",
            "/\\evil.example/",
            "https://evil.example/",
            "a/b",
            "/a b",
            "/a\nb",
            "/é",
        ] {
            assert_eq!(return_path(bad), None, "{bad:?}");
        }
        assert_eq!(
            return_path(&format!("/{}", "a".repeat(MAX_RETURN_LEN))),
            None
        );
    }

    #[test]
    fn submissions_parse_and_decode() {
        let s = Submission::parse(b"token=abc-_&nonce=42&return=%2Fx%3Fy%3D1%26z").unwrap();
        assert_eq!((s.token.as_str(), s.nonce.as_str()), ("abc-_", "42"));
        assert_eq!(s.return_to, "/x?y=1&z");
        let s = Submission::parse(b"return=%2F%2Fevil.example&token=t&token=u").unwrap();
        assert_eq!((s.token.as_str(), s.return_to.as_str()), ("t", "/"));
        assert_eq!(s.nonce, "");
        for bad in [
            &b"nonce=1"[..],
            b"token=",
            b"token=%zz",
            b"token=%C3%28",
            b"token=%4",
        ] {
            assert_eq!(Submission::parse(bad), Err(Rejected::Malformed), "{bad:?}");
        }
        let huge = format!("token=t&x={}", "a".repeat(MAX_FORM_LEN));
        assert_eq!(Submission::parse(huge.as_bytes()), Err(Rejected::Malformed));
    }

    #[test]
    fn wait_urls_encode_what_they_carry() {
        let url = wait_url("tok-_", "/a?b=<\"x\">&c");
        assert_eq!(
            url,
            "/cdn-cgi/challenge/wait?token=tok-_&return=%2Fa%3Fb%3D%3C%22x%22%3E%26c"
        );
        let query = url.split_once('?').unwrap().1;
        let s = Submission::parse(query.as_bytes()).unwrap();
        assert_eq!(s.return_to, "/a?b=<\"x\">&c");
    }
}

//! Turning an origin body into UTF-8 text: `Content-Encoding` undone under a size cap, then the
//! declared (or sniffed) charset decoded.

use std::borrow::Cow;
use std::io::Read;

use encoding_rs::Encoding;

use crate::options::Error;

/// At most this many codings are undone (`Content-Encoding: gzip, br` is two). Real origins send
/// one; the cap keeps a hostile header from stacking work.
pub const MAX_CODINGS: usize = 3;

/// The charset prescan looks at this many leading bytes, as the HTML standard's prescan does.
const PRESCAN_BYTES: usize = 1024;

/// Undoes `content_encoding` (a comma-separated list, applied in order by the origin, so undone
/// in reverse). The decoded size may not pass `max_bytes`: past it the answer is
/// [`Error::TooLarge`], found after reading at most `max_bytes + 1` bytes of output, so a
/// decompression bomb costs no more memory than an honest page at the cap.
pub fn decode_body<'a>(
    body: &'a [u8],
    content_encoding: Option<&str>,
    max_bytes: usize,
) -> Result<Cow<'a, [u8]>, Error> {
    let codings: Vec<&str> = content_encoding
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
        .collect();
    if codings.len() > MAX_CODINGS {
        return Err(Error::Encoding("too many content codings".into()));
    }
    let mut current: Cow<'a, [u8]> = Cow::Borrowed(body);
    for coding in codings.iter().rev() {
        let coding = coding.to_ascii_lowercase();
        let input: &[u8] = &current;
        let limit = max_bytes as u64 + 1;
        let mut out = Vec::with_capacity(input.len().saturating_mul(4).min(max_bytes + 1));
        let read = match coding.as_str() {
            "gzip" | "x-gzip" => flate2::read::MultiGzDecoder::new(input)
                .take(limit)
                .read_to_end(&mut out),
            "deflate" => {
                // RFC 9110 says zlib-wrapped; some servers send raw deflate. Try zlib first.
                let zlib = flate2::read::ZlibDecoder::new(input)
                    .take(limit)
                    .read_to_end(&mut out);
                if zlib.is_err() {
                    out.clear();
                    flate2::read::DeflateDecoder::new(input)
                        .take(limit)
                        .read_to_end(&mut out)
                } else {
                    zlib
                }
            }
            "br" => brotli_decompressor::Decompressor::new(input, 8192)
                .take(limit)
                .read_to_end(&mut out),
            "zstd" => match zstd::stream::read::Decoder::new(input) {
                Ok(decoder) => decoder.take(limit).read_to_end(&mut out),
                Err(e) => Err(e),
            },
            other => return Err(Error::Encoding(format!("unsupported coding {other:?}"))),
        };
        read.map_err(|e| Error::Encoding(format!("{coding}: {e}")))?;
        if out.len() > max_bytes {
            return Err(Error::TooLarge);
        }
        current = Cow::Owned(out);
    }
    if current.len() > max_bytes {
        return Err(Error::TooLarge);
    }
    Ok(current)
}

/// The charset of a page: a byte order mark wins, then the `Content-Type` header's `charset`,
/// then a `<meta charset>` or `http-equiv` declaration in the first 1024 bytes, else UTF-8.
pub fn sniff_encoding(body: &[u8], content_type: Option<&str>) -> &'static Encoding {
    if let Some((encoding, _)) = Encoding::for_bom(body) {
        return encoding;
    }
    if let Some(encoding) = content_type
        .and_then(charset_param)
        .and_then(|label| Encoding::for_label(label.as_bytes()))
    {
        return html_override(encoding);
    }
    if let Some(encoding) = prescan_meta(&body[..body.len().min(PRESCAN_BYTES)]) {
        return html_override(encoding);
    }
    encoding_rs::UTF_8
}

/// Decodes `body` to text by [`sniff_encoding`]; malformed sequences become U+FFFD, as a
/// browser shows them.
pub fn to_utf8<'a>(body: &'a [u8], content_type: Option<&str>) -> Cow<'a, str> {
    let encoding = sniff_encoding(body, content_type);
    // `decode` strips a BOM and replaces malformed input; it borrows when the input is valid
    // UTF-8 already.
    let (text, _, _) = encoding.decode(body);
    text
}

/// The HTML standard maps a declared UTF-16 in a meta tag to UTF-8 and some labels to
/// the encodings browsers really use; encoding_rs's labels already follow the standard, so only
/// the UTF-16 rule is applied here.
fn html_override(encoding: &'static Encoding) -> &'static Encoding {
    if encoding == encoding_rs::UTF_16LE || encoding == encoding_rs::UTF_16BE {
        encoding_rs::UTF_8
    } else {
        encoding
    }
}

/// The `charset` parameter of a `Content-Type` value, quotes removed.
pub(crate) fn charset_param(content_type: &str) -> Option<&str> {
    content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| value.trim().trim_matches('"').trim())
    })
}

/// A simplified HTML prescan: the first `charset=` inside a `<meta` tag names the encoding.
fn prescan_meta(head: &[u8]) -> Option<&'static Encoding> {
    let lower: Vec<u8> = head.iter().map(u8::to_ascii_lowercase).collect();
    let mut from = 0;
    while let Some(pos) = find(&lower[from..], b"<meta") {
        let start = from + pos + 5;
        let end = lower[start..]
            .iter()
            .position(|&b| b == b'>')
            .map_or(lower.len(), |e| start + e);
        let tag = &lower[start..end];
        if let Some(cpos) = find(tag, b"charset") {
            let rest = &tag[cpos + 7..];
            let rest = rest.trim_ascii_start();
            if let Some(rest) = rest.strip_prefix(b"=") {
                let rest = rest.trim_ascii_start();
                let rest = rest
                    .strip_prefix(b"\"")
                    .or_else(|| rest.strip_prefix(b"'"))
                    .unwrap_or(rest);
                let label_end = rest
                    .iter()
                    .position(|&b| {
                        matches!(b, b'"' | b'\'' | b';' | b'/' | b'>') || b.is_ascii_whitespace()
                    })
                    .unwrap_or(rest.len());
                if let Some(encoding) = Encoding::for_label(&rest[..label_end]) {
                    return Some(encoding);
                }
            }
        }
        from = end.min(lower.len());
        if from >= lower.len() {
            break;
        }
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn gzip_deflate_br_zstd_round_trip() {
        let page = b"<p>hello</p>".repeat(100);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&page).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(
            &*decode_body(&gz, Some("gzip"), 1 << 20).unwrap(),
            &page[..]
        );

        let mut zl = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        zl.write_all(&page).unwrap();
        let zl = zl.finish().unwrap();
        assert_eq!(
            &*decode_body(&zl, Some("deflate"), 1 << 20).unwrap(),
            &page[..]
        );

        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        raw.write_all(&page).unwrap();
        let raw = raw.finish().unwrap();
        assert_eq!(
            &*decode_body(&raw, Some("Deflate"), 1 << 20).unwrap(),
            &page[..]
        );

        let zs = zstd::encode_all(&page[..], 3).unwrap();
        assert_eq!(
            &*decode_body(&zs, Some("zstd"), 1 << 20).unwrap(),
            &page[..]
        );

        // gzip then zstd, undone in reverse order.
        let both = zstd::encode_all(&gz[..], 3).unwrap();
        assert_eq!(
            &*decode_body(&both, Some("gzip, zstd"), 1 << 20).unwrap(),
            &page[..]
        );
    }

    #[test]
    fn brotli_decodes() {
        let page = b"<p>hello</p>".repeat(100);
        let mut br = Vec::new();
        {
            let mut w = brotli::CompressorWriter::new(&mut br, 4096, 5, 22);
            w.write_all(&page).unwrap();
        }
        assert_eq!(&*decode_body(&br, Some("br"), 1 << 20).unwrap(), &page[..]);
        assert!(matches!(
            decode_body(&br, Some("br"), 100),
            Err(Error::TooLarge)
        ));
    }

    #[test]
    fn bombs_stop_at_the_cap() {
        let page = vec![b'a'; 10 << 20];
        let zs = zstd::encode_all(&page[..], 3).unwrap();
        assert!(zs.len() < 10_000);
        assert!(matches!(
            decode_body(&zs, Some("zstd"), 1 << 20),
            Err(Error::TooLarge)
        ));
        assert!(matches!(
            decode_body(&page, None, 1 << 20),
            Err(Error::TooLarge)
        ));
        assert_eq!(decode_body(&page, None, 10 << 20).unwrap().len(), 10 << 20);
    }

    #[test]
    fn unknown_and_corrupt_codings_are_errors() {
        assert!(matches!(
            decode_body(b"x", Some("compress"), 100),
            Err(Error::Encoding(_))
        ));
        assert!(matches!(
            decode_body(b"not gzip", Some("gzip"), 100),
            Err(Error::Encoding(_))
        ));
        assert!(matches!(
            decode_body(b"x", Some("gzip, gzip, gzip, gzip"), 100),
            Err(Error::Encoding(_))
        ));
        assert_eq!(&*decode_body(b"x", Some("identity"), 100).unwrap(), b"x");
    }

    #[test]
    fn charsets_from_header_meta_and_bom() {
        let latin1 = b"<p>caf\xe9</p>";
        assert_eq!(
            to_utf8(latin1, Some("text/html; charset=ISO-8859-1")),
            "<p>café</p>"
        );
        let meta = b"<html><head><meta charset=\"windows-1252\"></head><p>\x93hi\x94</p>";
        assert!(to_utf8(meta, Some("text/html")).contains("\u{201c}hi\u{201d}"));
        let equiv =
            b"<meta http-equiv=Content-Type content='text/html; charset=shift_jis'>\x93\xfa";
        assert!(to_utf8(equiv, None).ends_with('日'));
        let bom = b"\xef\xbb\xbf<p>x</p>";
        assert_eq!(to_utf8(bom, Some("text/html; charset=latin1")), "<p>x</p>");
        assert_eq!(to_utf8(b"<p>\xff</p>", None), "<p>\u{fffd}</p>");
    }
}

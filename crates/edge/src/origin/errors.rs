//! The origin's own errors, for agents (`[zone.origin_errors] structured = true`), and error
//! rules that match them (`http.response.code`, with `cf.response.1xxx_code` 0).
//!
//! Pingora streams the origin's answer; an error the edge reshapes is decided on its head, in
//! `response_filter`: the head becomes the problem's (the origin's status, or the rule's; the
//! origin's other headers kept but for those that described its body), and the body the problem
//! rendered then. `response_body_filter` sends that body in place of the origin's first chunk
//! and drops the origin's bytes as they arrive, so nothing of them is kept: past
//! [`MAX_DISCARDED_BYTES`] the origin connection is cut (the client already has its whole
//! answer). An origin error that declares an empty body has no chunk to replace: its problem is
//! answered by `fail_to_proxy` instead, and the client's connection closed.
//!
//! Nothing here runs for an origin answer below 400, and nothing for a zone that neither asks
//! for structured origin errors nor has an error rule.

use bytes::Bytes;
use http::header;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::Session;
use signpost_problem::Custom;

use crate::answer::Answer;

/// An origin error the edge answers in place of the origin's.
#[derive(Default)]
pub struct OriginErrorState {
    /// An origin error whose body the edge is replacing with a problem.
    pub replacing: Option<Replacing>,
    /// An origin error with an empty body, answered by `fail_to_proxy`: its head and body.
    /// Boxed: rare, and a proxied request's context stays as small as it was.
    pub answer: Option<Box<(pingora::http::ResponseHeader, bytes::Bytes)>>,
}

/// The most origin body bytes read and dropped after the edge answered an origin error in their
/// place: an error page is a few KiB; an origin that sends more is cut, not read to its end.
pub const MAX_DISCARDED_BYTES: u64 = 1 << 20;

/// The error type of an origin error answered by `fail_to_proxy` (its body was declared empty,
/// so there is no chunk to put the problem in).
pub const ANSWERED_IN_PLACE: ErrorType = ErrorType::Custom("OriginErrorAnsweredInPlace");

/// An origin error being replaced: the problem's body until it is sent, then a count of the
/// origin's bytes dropped.
pub struct Replacing {
    body: Option<Bytes>,
    discarded: u64,
}

/// The answer the edge gives in place of an origin's error: the problem's head (the origin's
/// other headers kept) and its body.
pub struct Reshaped {
    pub head: ResponseHeader,
    pub body: Bytes,
}

/// How the proxy route carries an answer the edge gives in place of the origin's.
pub enum InPlace {
    /// A response to HEAD: the head is all there is.
    HeadOnly,
    /// Its body goes in place of the origin's ([`body_filter`]).
    Body(Replacing),
    /// The origin declared an empty body, so no body call will come to carry the answer's:
    /// `fail_to_proxy` writes it, head and body (the route is told by [`ANSWERED_IN_PLACE`]).
    Whole(Box<(ResponseHeader, Bytes)>),
}

/// On the proxy route, puts `answer` in place of the origin's `response` (its head now) and says
/// how its body goes out. Used for every answer `origin_route::filter_response` gives in place
/// of the origin's: reshaped errors, crawl control's refusals, robots.txt's managed block.
pub fn replace(head_only: bool, response: &mut ResponseHeader, answer: Reshaped) -> InPlace {
    let Reshaped { head, body } = answer;
    let declared_empty = response
        .headers
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() == b"0");
    *response = head;
    if head_only {
        InPlace::HeadOnly
    } else if declared_empty {
        InPlace::Whole(Box::new((response.clone(), body)))
    } else {
        InPlace::Body(Replacing {
            body: Some(body),
            discarded: 0,
        })
    }
}

/// Whether a zone that asks for structured origin errors (`structured`) answers the origin's
/// error `response` itself for a client whose `Accept` is `accept`: a client that negotiated
/// JSON or Markdown, when the origin's body is not already structured. (An error rule matching
/// the origin's status answers in any format.)
pub fn wanted(structured: bool, accept: Option<&[u8]>, response: &ResponseHeader) -> bool {
    structured && signpost_problem::negotiate(accept).is_structured() && !is_structured(response)
}

/// What changes in the problem answering the origin's error `response`: the retry advice its
/// status and `Retry-After` give, under what the matching error rule (`rule`) says.
pub fn custom(response: &ResponseHeader, rule: Option<&Custom>) -> Custom {
    advice(response.status.as_u16(), retry_after(response), rule)
}

/// The problem `answer` made to stand in place of the origin's error `response`: the origin's
/// other headers kept (cookies, `WWW-Authenticate`, its own), those describing its body not.
pub fn reshaped(response: &ResponseHeader, answer: Answer) -> Result<Reshaped> {
    let Answer { mut head, body, .. } = answer;
    keep_origin_headers(response, &mut head)?;
    Ok(Reshaped { head, body })
}

/// Puts the problem's body in place of the origin's first chunk and drops the rest.
pub fn body_filter(body: &mut Option<Bytes>, replacing: &mut Replacing) -> Result<()> {
    let dropped = body.take().map_or(0, |b| b.len() as u64);
    replacing.discarded = replacing.discarded.saturating_add(dropped);
    if let Some(problem) = replacing.body.take() {
        *body = Some(problem);
    } else if replacing.discarded > MAX_DISCARDED_BYTES {
        return Error::e_explain(
            ANSWERED_IN_PLACE,
            "origin error body over the bound of bytes dropped",
        );
    }
    Ok(())
}

/// Writes an origin error whose body was declared empty ([`InPlace::Whole`]).
pub async fn write_in_place(
    session: &mut Session,
    head: ResponseHeader,
    body: Bytes,
) -> Result<u16> {
    let status = head.status.as_u16();
    session.set_keepalive(None);
    let head_only = session.req_header().method == http::Method::HEAD;
    session
        .write_response_header(Box::new(head), head_only)
        .await?;
    if !head_only {
        session.write_response_body(Some(body), true).await?;
    }
    Ok(status)
}

/// Whether the origin's body is already for programs: JSON or problem+json (any `+json`).
fn is_structured(response: &ResponseHeader) -> bool {
    let Some(value) = response.headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    let essence = value
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// The origin's `Retry-After` in seconds: delta-seconds, or an HTTP date from now (RFC 9110
/// section 10.2.3); at most a day, past dates and garbage ignored.
fn retry_after(response: &ResponseHeader) -> Option<u32> {
    const MAX: u64 = 86_400;
    let text = response
        .headers
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let seconds = match text.parse::<u64>() {
        Ok(n) => n,
        Err(_) => {
            let at = httpdate(text)?;
            at.duration_since(std::time::SystemTime::now())
                .ok()?
                .as_secs()
        }
    };
    u32::try_from(seconds.clamp(1, MAX)).ok()
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form RFC 9110 requires senders to use,
/// turned into RFC 3339 for humantime, which parses that; the obsolete forms are not read.
fn httpdate(text: &str) -> Option<std::time::SystemTime> {
    let mut parts = text.split_whitespace();
    let _weekday = parts.next()?;
    let day: u64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: u64 = parts.next()?.parse().ok()?;
    let time = parts.next()?;
    if parts.next()? != "GMT" {
        return None;
    }
    let rfc3339 = format!("{year:04}-{month:02}-{day:02}T{time}Z");
    humantime::parse_rfc3339(&rfc3339).ok()
}

/// Retry advice for an origin's status: 429, 502, 503 and 504 are retryable (after the origin's
/// `Retry-After`, or the catalog's wait); another 5xx only when the origin sent a
/// `Retry-After`; other 4xx never. A matched rule's own values win.
fn advice(status: u16, origin_wait: Option<u32>, rule: Option<&Custom>) -> Custom {
    let retryable = match status {
        429 | 502 | 503 | 504 => true,
        500..=599 => origin_wait.is_some(),
        _ => false,
    };
    let base = Custom {
        retryable: Some(retryable),
        retry_after: origin_wait.filter(|_| retryable),
        ..Custom::default()
    };
    match rule {
        None => base,
        Some(rule) => Custom {
            retryable: rule.retryable.or(base.retryable),
            retry_after: rule.retry_after.or(base.retry_after),
            ..rule.clone()
        },
    }
}

/// Headers that described the origin's body or its caching: the problem's replace them.
const ORIGIN_BODY_HEADERS: [header::HeaderName; 14] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::CONTENT_ENCODING,
    header::CONTENT_RANGE,
    header::CONTENT_LANGUAGE,
    header::CONTENT_DISPOSITION,
    header::CONTENT_SECURITY_POLICY,
    header::ACCEPT_RANGES,
    header::ETAG,
    header::LAST_MODIFIED,
    header::CACHE_CONTROL,
    header::RETRY_AFTER,
    header::VARY,
];

/// Copies the origin's other headers (cookies, `WWW-Authenticate`, `Allow`, its own) onto the
/// problem's head, after the problem's own.
fn keep_origin_headers(origin: &ResponseHeader, head: &mut ResponseHeader) -> Result<()> {
    for (name, value) in &origin.headers {
        if ORIGIN_BODY_HEADERS.contains(name)
            || head.headers.contains_key(name)
            || name == header::CONNECTION
            || name.as_str() == "keep-alive"
            || name == header::EXPIRES
            || name == header::X_CONTENT_TYPE_OPTIONS
        {
            continue;
        }
        head.append_header(name.clone(), value.clone())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16, headers: &[(&str, &str)]) -> ResponseHeader {
        let mut h = ResponseHeader::build(status, None).unwrap();
        for (n, v) in headers {
            h.insert_header(n.to_string(), *v).unwrap();
        }
        h
    }

    #[test]
    fn structured_origin_bodies_are_recognised() {
        for ct in [
            "application/json",
            "application/problem+json; charset=utf-8",
            "Application/JSON",
            "application/vnd.api+json",
        ] {
            assert!(is_structured(&head(500, &[("content-type", ct)])), "{ct}");
        }
        for ct in ["text/html", "text/plain", "application/xml"] {
            assert!(!is_structured(&head(500, &[("content-type", ct)])), "{ct}");
        }
        assert!(!is_structured(&head(500, &[])));
    }

    #[test]
    fn retry_after_is_read_both_ways() {
        assert_eq!(
            retry_after(&head(503, &[("retry-after", "120")])),
            Some(120)
        );
        assert_eq!(retry_after(&head(503, &[("retry-after", "0")])), Some(1));
        assert_eq!(
            retry_after(&head(503, &[("retry-after", "99999999")])),
            Some(86_400)
        );
        assert_eq!(retry_after(&head(503, &[("retry-after", "soon")])), None);
        assert_eq!(
            retry_after(&head(
                503,
                &[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")]
            )),
            None,
            "a date in the past"
        );
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
        let date = httpdate_of(later);
        let got = retry_after(&head(503, &[("retry-after", &date)])).unwrap();
        assert!((3590..=3600).contains(&got), "{got} from {date}");
    }

    fn httpdate_of(t: std::time::SystemTime) -> String {
        // `2026-11-25T12:00:00Z` → `Wed, 25 Nov 2026 12:00:00 GMT` (the weekday is not read).
        let s = humantime::format_rfc3339_seconds(t).to_string();
        let months = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let month: usize = s[5..7].parse().unwrap();
        format!(
            "Xxx, {} {} {} {} GMT",
            &s[8..10],
            months[month - 1],
            &s[0..4],
            &s[11..19]
        )
    }

    #[test]
    fn retry_advice_follows_the_status() {
        let r = advice(503, Some(120), None);
        assert_eq!((r.retryable, r.retry_after), (Some(true), Some(120)));
        let r = advice(503, None, None);
        assert_eq!((r.retryable, r.retry_after), (Some(true), None));
        let r = advice(404, Some(120), None);
        assert_eq!((r.retryable, r.retry_after), (Some(false), None));
        let r = advice(500, None, None);
        assert_eq!(r.retryable, Some(false));
        let r = advice(500, Some(5), None);
        assert_eq!((r.retryable, r.retry_after), (Some(true), Some(5)));
        let rule = Custom {
            retryable: Some(false),
            title: Some("t".into()),
            ..Custom::default()
        };
        let r = advice(503, Some(120), Some(&rule));
        assert_eq!((r.retryable, r.title.as_deref()), (Some(false), Some("t")));
    }
}

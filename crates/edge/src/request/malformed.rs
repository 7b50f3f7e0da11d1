//! Requests whose header Pingora cannot read: malformed, over its limits, or too slow. The
//! vendored Pingora patch (vendor/README.md) calls [`answer_unreadable`] before any request
//! context exists; it answers with the error contract like every other refusal.

use bytes::Bytes;
use pingora::ErrorType;
use pingora::protocols::http::ServerSession;
use signpost_problem::{Branding, Code, Visitor};

use crate::answer::Answer;
use crate::connection::conncap::ConnectionMetrics;
use crate::log::{LogBudget, LogSafe};
use crate::request::limits::{MAX_HEADER_BYTES, MAX_URI_LEN};
use crate::request::ray::RayId;

/// Header lines past which a header that could not be read is "too many headers" (431):
/// Pingora's own limit is 256 lines.
const MAX_HEADER_LINES: usize = 256;

/// How one unreadable request is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// Answer with this code, then close.
    Answer(Code),
    /// Close without a word: nothing of a request arrived, or the client is gone.
    Close,
}

/// What to do about a request header that failed with `etype` after `head` arrived.
pub fn classify(etype: &ErrorType, head: &[u8]) -> Unreadable {
    match etype {
        // Nothing arrived before the deadline: an idle connection, not a request.
        ErrorType::ReadTimedout if head.is_empty() => Unreadable::Close,
        ErrorType::ReadTimedout => Unreadable::Answer(Code::REQUEST_TIMEOUT),
        ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError => {
            Unreadable::Close
        }
        _ => {
            let request_line = head.split(|b| *b == b'\n').next().unwrap_or_default();
            let header_end = find(head, b"\r\n\r\n").map_or(head.len(), |i| i + 4);
            let lines = head[..header_end].iter().filter(|b| **b == b'\n').count();
            if request_line.len() > MAX_URI_LEN {
                Unreadable::Answer(Code::URI_TOO_LONG)
            } else if header_end > MAX_HEADER_BYTES || lines > MAX_HEADER_LINES {
                Unreadable::Answer(Code::HEADERS_TOO_LARGE)
            } else {
                Unreadable::Answer(Code::BAD_REQUEST)
            }
        }
    }
}

/// The value of the first complete header line named `name` (ASCII case-insensitive) in the
/// header section of `head`, trimmed; `None` when no such line arrived whole.
pub fn header_line<'a>(head: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let header_end = find(head, b"\r\n\r\n").map_or(head.len(), |i| i + 2);
    let section = &head[..header_end];
    let mut lines = section.split(|b| *b == b'\n');
    lines.next(); // the request line
    // The last piece has no newline after it: it did not arrive whole.
    let complete = section.iter().filter(|b| **b == b'\n').count();
    lines.take(complete.saturating_sub(1)).find_map(|line| {
        let colon = line.iter().position(|b| *b == b':')?;
        let (n, v) = line.split_at(colon);
        n.eq_ignore_ascii_case(name.as_bytes())
            .then(|| v[1..].trim_ascii())
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Writes the problem for an unreadable request, negotiated from an `Accept` line if one
/// arrived whole, with a fresh ray id, and logs it within the log budget. The connection is
/// closed afterwards (by Pingora).
pub async fn answer_unreadable(
    session: &mut ServerSession,
    error: &pingora::Error,
    branding: &Branding,
    connections: &ConnectionMetrics,
    budget: &LogBudget,
) {
    let head = session.unparsed_request_head();
    let outcome = classify(error.etype(), head);
    let event = match (error.etype(), outcome) {
        (_, Unreadable::Close) if *error.etype() != ErrorType::ReadTimedout => return,
        (ErrorType::ReadTimedout, _) => "header_timeout",
        _ => "malformed",
    };
    connections.event(event);
    let Unreadable::Answer(code) = outcome else {
        return;
    };
    let ray = RayId::next();
    let format = signpost_problem::negotiate(header_line(head, "accept"));
    let host = header_line(head, "host")
        .map(|h| signpost_policy::normalize_host(&String::from_utf8_lossy(h)).to_string())
        .unwrap_or_default();
    let Ok(answer) = Answer::new(
        crate::answer::entry(code),
        format,
        ray,
        &host,
        None,
        branding,
        // No error rule: a request that could not be read has no fields to match on.
        None,
        // Nor a zone to fix the page's language: the client's own header chooses it.
        &Visitor::for_request(header_line(head, "accept-language"), None),
    ) else {
        return;
    };
    if budget.allow() {
        let suppressed = budget.take_suppressed();
        tracing::info!(
            target: "access",
            ray_id = %ray,
            client = %LogSafe(&session.client_addr().map(|a| a.to_string()).unwrap_or_default()),
            status = answer.head.status.as_u16(),
            error_code = code.get(),
            format = format.as_str(),
            bytes = head.len(),
            error = %LogSafe(error.etype().as_str()),
            suppressed,
            "unreadable request refused"
        );
    }
    let Answer {
        head: mut header,
        body,
        ..
    } = answer;
    let _ = header.insert_header("connection", "close");
    let body = if head.starts_with(b"HEAD ") {
        Bytes::new()
    } else {
        body
    };
    // The client may already be gone; there is nothing more to do then.
    let _ = session.write_error_response(header, body).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        let bad = ErrorType::InvalidHTTPHeader;
        assert_eq!(
            classify(&bad, b"GET / HTTP/1.1\r\nno colon\r\n\r\n"),
            Unreadable::Answer(Code::BAD_REQUEST)
        );
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(70_000));
        assert_eq!(
            classify(&bad, long.as_bytes()),
            Unreadable::Answer(Code::URI_TOO_LONG)
        );
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "a: b\r\n".repeat(300));
        assert_eq!(
            classify(&bad, many.as_bytes()),
            Unreadable::Answer(Code::HEADERS_TOO_LARGE)
        );
        assert_eq!(classify(&ErrorType::ReadTimedout, b""), Unreadable::Close);
        assert_eq!(
            classify(&ErrorType::ReadTimedout, b"GET / HT"),
            Unreadable::Answer(Code::REQUEST_TIMEOUT)
        );
    }

    #[test]
    fn only_whole_lines_are_read() {
        let head = b"GET / HTTP/1.1\r\nAccept: application/json\r\nHost: a.test\r\nx\0y\r\n\r\n";
        assert_eq!(header_line(head, "ACCEPT"), Some(&b"application/json"[..]));
        assert_eq!(header_line(head, "host"), Some(&b"a.test"[..]));
        assert_eq!(
            header_line(b"GET / HTTP/1.1\r\nAccept: applic", "accept"),
            None
        );
        assert_eq!(
            header_line(b"Accept: x\r\n", "accept"),
            None,
            "a request line"
        );
    }
}

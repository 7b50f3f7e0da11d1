//! The one table from a failure while proxying to the error code the client is told.

use pingora::{Error, ErrorSource, ErrorType};
use signpost_problem::Code;

/// The error type raised when the origin's host name does not resolve (1016).
pub const ORIGIN_DNS_ERROR: ErrorType = ErrorType::Custom("OriginDnsError");
/// A request body over the zone's `max_body_size` (413).
pub const BODY_TOO_LARGE: ErrorType = ErrorType::Custom("RequestBodyTooLarge");
/// A request body slower than `body_min_rate` (408).
pub const BODY_TOO_SLOW: ErrorType = ErrorType::Custom("RequestBodyTooSlow");

/// Pingora's body parser's own error types (its `v1::body` module is private): a chunk size or
/// extension that is not valid, trailers that do not end, a body cut short.
const INVALID_CHUNK: ErrorType = ErrorType::Custom("InvalidChunk");
const INVALID_TRAILER_END: ErrorType = ErrorType::Custom("InvalidTrailerEnd");
const PREMATURE_BODY_END: ErrorType = ErrorType::Custom("PrematureBodyEnd");

/// What the client should be told about a request that failed after the policy let it through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rescue {
    /// Render this catalog code.
    Answer(Code),
    /// The client's own connection is gone or broken: nothing can be written.
    ClientGone,
}

/// Maps a Pingora error to a Cloudflare-compatible code.
///
/// The error's source decides first, as in Pingora's own `fail_to_proxy`: only failures on the
/// origin side become 52x. Errors we cannot name become 502 (origin side) or 500 (our side),
/// never a message with internal text.
pub fn rescue(e: &Error) -> Rescue {
    use ErrorType::*;
    if *e.etype() == ORIGIN_DNS_ERROR {
        return Rescue::Answer(Code::ORIGIN_DNS_ERROR);
    }
    // The client's own mistakes, whatever the source Pingora gave them: never the edge's 500.
    if *e.etype() == BODY_TOO_LARGE {
        return Rescue::Answer(Code::PAYLOAD_TOO_LARGE);
    }
    if *e.etype() == BODY_TOO_SLOW {
        return Rescue::Answer(Code::REQUEST_TIMEOUT);
    }
    match e.esource() {
        ErrorSource::Upstream => Rescue::Answer(match e.etype() {
            ConnectRefused => Code::ORIGIN_DOWN,
            ConnectTimedout => Code::CONNECTION_TIMED_OUT,
            ConnectNoRoute => Code::ORIGIN_UNREACHABLE,
            ReadTimedout | WriteTimedout => Code::ORIGIN_TIMEOUT,
            TLSHandshakeFailure | TLSHandshakeTimedout | HandshakeError | TLSWantX509Lookup => {
                Code::ORIGIN_SSL_HANDSHAKE_FAILED
            }
            InvalidCert => Code::ORIGIN_INVALID_CERT,
            // The origin accepted the connection, then sent nothing usable.
            ConnectionClosed | ReadError | InvalidHTTPHeader | H1Error | H2Error | InvalidH2 => {
                Code::ORIGIN_UNKNOWN_ERROR
            }
            _ => Code::BAD_GATEWAY,
        }),
        ErrorSource::Downstream => match e.etype() {
            WriteError | ReadError | ConnectionClosed => Rescue::ClientGone,
            // The client stopped sending its body: 408, as nginx answers.
            ReadTimedout => Rescue::Answer(Code::REQUEST_TIMEOUT),
            // A body the client ended early has no one left to read an answer.
            t if *t == PREMATURE_BODY_END => Rescue::ClientGone,
            // A response the client stopped taking (`[connections] send_timeout`): nothing more
            // can be written.
            WriteTimedout => Rescue::ClientGone,
            // The client's HTTP/2 stream is gone: the client reset it (it cancelled the request),
            // or h2 reset it for the client's protocol error. Either way no answer can reach it.
            H2Error => Rescue::ClientGone,
            // A request or body that cannot be parsed (a bad chunk size, an invalid header):
            // the client's mistake, 400, never retryable.
            InvalidHTTPHeader | H1Error | InvalidH2 => Rescue::Answer(Code::BAD_REQUEST),
            t if *t == INVALID_CHUNK || *t == INVALID_TRAILER_END => {
                Rescue::Answer(Code::BAD_REQUEST)
            }
            _ => Rescue::Answer(Code::INTERNAL_ERROR),
        },
        ErrorSource::Internal | ErrorSource::Unset => match e.etype() {
            // Pingora reports a refused or timed-out connect from the connector with the
            // source left unset in some paths; name them as the origin's failures anyway.
            ConnectRefused => Rescue::Answer(Code::ORIGIN_DOWN),
            ConnectTimedout => Rescue::Answer(Code::CONNECTION_TIMED_OUT),
            ConnectNoRoute => Rescue::Answer(Code::ORIGIN_UNREACHABLE),
            HTTPStatus(code) if (500..600).contains(code) => Rescue::Answer(Code::new(*code)),
            _ => Rescue::Answer(Code::INTERNAL_ERROR),
        },
    }
}

/// How Pingora words the client's reset of a stream it was waiting on (`read_body_or_idle` in
/// pingora-core's `v2/server.rs`): the reset's reason is in the text, with no h2 error to
/// inspect. `tests/e2e/h2_abuse.rs` holds the wording to Pingora's (a client's resets are counted
/// as cancellations there).
const CLIENT_CLOSED_H2: &str = "Client closed H2";

/// Whether `e` is the client's reset of its HTTP/2 stream (RST_STREAM, or a GOAWAY that ended it),
/// anywhere in its chain of causes.
fn is_client_reset(e: &Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        // Pingora chains its errors boxed (`BError`); the first link is not.
        let link = c
            .downcast_ref::<Error>()
            .or_else(|| c.downcast_ref::<Box<Error>>().map(|b| &**b));
        if let Some(e) = link {
            if e.context
                .as_ref()
                .is_some_and(|c| c.as_str().starts_with(CLIENT_CLOSED_H2))
            {
                return true;
            }
            cause = e
                .cause
                .as_deref()
                .map(|c| c as &(dyn std::error::Error + 'static));
        } else if let Some(h2) = c.downcast_ref::<h2::Error>() {
            return h2.is_remote() && (h2.is_reset() || h2.is_go_away());
        } else {
            cause = c.source();
        }
    }
    false
}

/// What a failure on the client's side was, for the access log and
/// `signpost_connection_events_total`: the client stopped taking the response
/// (`send_timeout`), left before it ended or reset its stream (`request_cancelled`), or its
/// HTTP/2 stream ended for another error (`h2_stream_error`). `None` for every other failure.
pub fn client_event(e: &Error) -> Option<&'static str> {
    if e.esource() != &ErrorSource::Downstream || rescue(e) != Rescue::ClientGone {
        return None;
    }
    Some(match e.etype() {
        ErrorType::WriteTimedout => "send_timeout",
        ErrorType::H2Error if !is_client_reset(e) => "h2_stream_error",
        _ => "request_cancelled",
    })
}

/// Whether `e` is a request body that stopped arriving for `body_timeout` (the read deadline
/// the edge sets once the header is read): a `body_timeout` event, like a body too slow.
pub fn is_stalled_body(e: &Error) -> bool {
    e.esource() == &ErrorSource::Downstream && *e.etype() == ErrorType::ReadTimedout
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(etype: ErrorType) -> Rescue {
        rescue(&Error::new_up(etype))
    }

    #[test]
    fn origin_failures_map_to_52x() {
        assert_eq!(
            upstream(ErrorType::ConnectRefused),
            Rescue::Answer(Code::new(521))
        );
        assert_eq!(
            upstream(ErrorType::ConnectTimedout),
            Rescue::Answer(Code::new(522))
        );
        assert_eq!(
            upstream(ErrorType::ConnectNoRoute),
            Rescue::Answer(Code::new(523))
        );
        assert_eq!(
            upstream(ErrorType::ReadTimedout),
            Rescue::Answer(Code::new(524))
        );
        assert_eq!(
            upstream(ErrorType::TLSHandshakeFailure),
            Rescue::Answer(Code::new(525))
        );
        assert_eq!(
            upstream(ErrorType::InvalidCert),
            Rescue::Answer(Code::new(526))
        );
        assert_eq!(
            upstream(ErrorType::ConnectionClosed),
            Rescue::Answer(Code::new(520))
        );
        assert_eq!(
            upstream(ErrorType::InvalidHTTPHeader),
            Rescue::Answer(Code::new(520))
        );
        assert_eq!(
            upstream(ErrorType::SocketError),
            Rescue::Answer(Code::new(502))
        );
    }

    #[test]
    fn dns_failure_is_1016_whatever_the_source() {
        assert_eq!(
            rescue(&Error::new(ORIGIN_DNS_ERROR)),
            Rescue::Answer(Code::new(1016))
        );
    }

    #[test]
    fn client_mistakes_are_4xx() {
        let down = |etype| rescue(&Error::new_down(etype));
        assert_eq!(down(INVALID_CHUNK), Rescue::Answer(Code::BAD_REQUEST));
        assert_eq!(down(INVALID_TRAILER_END), Rescue::Answer(Code::BAD_REQUEST));
        assert_eq!(
            down(ErrorType::InvalidHTTPHeader),
            Rescue::Answer(Code::BAD_REQUEST)
        );
        assert_eq!(
            down(ErrorType::ReadTimedout),
            Rescue::Answer(Code::REQUEST_TIMEOUT)
        );
        assert_eq!(down(PREMATURE_BODY_END), Rescue::ClientGone);
        // The pipeline's own body limits, whatever source Pingora gives them.
        assert_eq!(
            rescue(&Error::new(BODY_TOO_LARGE)),
            Rescue::Answer(Code::PAYLOAD_TOO_LARGE)
        );
        assert_eq!(
            rescue(&Error::new(BODY_TOO_SLOW)),
            Rescue::Answer(Code::REQUEST_TIMEOUT)
        );
    }

    #[test]
    fn a_dead_client_gets_nothing() {
        let e = Error::new_down(ErrorType::WriteError);
        assert_eq!(rescue(&e), Rescue::ClientGone);
        assert_eq!(client_event(&e), Some("request_cancelled"));
    }

    #[test]
    fn a_client_that_stops_reading_or_resets_its_stream_is_no_client_error() {
        let stalled = Error::new_down(ErrorType::WriteTimedout);
        assert_eq!(rescue(&stalled), Rescue::ClientGone);
        assert_eq!(client_event(&stalled), Some("send_timeout"));

        let mut reset = Error::because(
            ErrorType::H2Error,
            "downstream error while idling",
            h2::Error::from(h2::Reason::CANCEL),
        );
        reset.as_down();
        // `h2::Error::from(Reason)` is a local reset (a remote one cannot be built outside h2,
        // so the end-to-end tests cover the client's own reset): the stream is gone all the same.
        assert_eq!(rescue(&reset), Rescue::ClientGone);
        assert_eq!(client_event(&reset), Some("h2_stream_error"));

        // The reset the proxy sees while it waits on the origin, as Pingora words it.
        let mut waiting = Error::explain(
            ErrorType::H2Error,
            format!("{CLIENT_CLOSED_H2}, reason: {}", h2::Reason::CANCEL),
        );
        waiting.as_down();
        assert_eq!(rescue(&waiting), Rescue::ClientGone);
        assert_eq!(client_event(&waiting), Some("request_cancelled"));
        // And as the proxy hands it on, wrapped.
        let mut wrapped = Error::because(ErrorType::H2Error, "while proxying", waiting);
        wrapped.as_down();
        assert_eq!(client_event(&wrapped), Some("request_cancelled"));

        // Origin timeouts are the origin's, not a cancellation.
        assert_eq!(client_event(&Error::new_up(ErrorType::ReadTimedout)), None);
        assert!(is_stalled_body(&Error::new_down(ErrorType::ReadTimedout)));
        assert!(!is_stalled_body(&Error::new_up(ErrorType::ReadTimedout)));
        assert_eq!(
            client_event(&Error::new_down(ErrorType::ReadTimedout)),
            None,
            "a body the client stopped sending is its 408"
        );
    }
}

#[cfg(test)]
mod catalog_coverage {
    use signpost_policy::Code;

    /// Every code the edge can raise, from the policy, the pipeline or the rescue table, has a
    /// catalog entry, so no answer falls back to the generic 500.
    #[test]
    fn every_code_the_edge_raises_is_in_the_catalog() {
        let codes = [
            Code::DNS_RESOLUTION_ERROR,
            Code::DIRECT_IP_ACCESS,
            Code::ASN_BANNED,
            Code::IP_BANNED,
            Code::COUNTRY_BANNED,
            Code::BROWSER_SIGNATURE_BANNED,
            Code::HOTLINKING_DENIED,
            Code::TLS_HOST_MISMATCH,
            Code::RATE_LIMITED,
            Code::ORIGIN_DNS_ERROR,
            Code::FIREWALL_RULE_BLOCKED,
            Code::LEGAL_BLOCK,
            Code::NOT_FOUND,
            Code::BAD_REQUEST,
            Code::METHOD_NOT_ALLOWED,
            Code::REQUEST_TIMEOUT,
            Code::PAYLOAD_TOO_LARGE,
            Code::URI_TOO_LONG,
            Code::HEADERS_TOO_LARGE,
            Code::INTERNAL_ERROR,
            Code::BAD_GATEWAY,
            Code::ORIGIN_UNKNOWN_ERROR,
            Code::ORIGIN_DOWN,
            Code::CONNECTION_TIMED_OUT,
            Code::ORIGIN_UNREACHABLE,
            Code::ORIGIN_TIMEOUT,
            Code::ORIGIN_SSL_HANDSHAKE_FAILED,
            Code::ORIGIN_INVALID_CERT,
            // Crawl control's refusals.
            signpost_policy::BLOCK_CODE,
            signpost_policy::PAYMENT_REQUIRED_CODE,
        ];
        for code in codes {
            assert!(
                signpost_problem::lookup(code).is_some(),
                "{code} is not in the catalog"
            );
        }
    }
}

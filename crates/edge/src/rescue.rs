//! The one table from a failure while proxying to the error code the client is told.

use pingora::{Error, ErrorSource, ErrorType};

/// The error type raised when the origin's host name does not resolve (1016).
pub const ORIGIN_DNS_ERROR: ErrorType = ErrorType::Custom("OriginDnsError");

/// What the client should be told about a request that failed after the policy let it through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rescue {
    /// Render this catalog code.
    Code(u16),
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
        return Rescue::Code(1016);
    }
    match e.esource() {
        ErrorSource::Upstream => Rescue::Code(match e.etype() {
            ConnectRefused => 521,
            ConnectTimedout => 522,
            ConnectNoRoute => 523,
            ReadTimedout | WriteTimedout => 524,
            TLSHandshakeFailure | TLSHandshakeTimedout | HandshakeError | TLSWantX509Lookup => 525,
            InvalidCert => 526,
            // The origin accepted the connection, then sent nothing usable.
            ConnectionClosed | ReadError | InvalidHTTPHeader | H1Error | H2Error | InvalidH2 => 520,
            _ => 502,
        }),
        ErrorSource::Downstream => match e.etype() {
            WriteError | ReadError | ConnectionClosed => Rescue::ClientGone,
            // A request we could not read (or a body we could not take): the edge's fault
            // only in that it must answer; 500 is the closest catalog entry.
            _ => Rescue::Code(500),
        },
        ErrorSource::Internal | ErrorSource::Unset => match e.etype() {
            // Pingora reports a refused or timed-out connect from the connector with the
            // source left unset in some paths; name them as the origin's failures anyway.
            ConnectRefused => Rescue::Code(521),
            ConnectTimedout => Rescue::Code(522),
            ConnectNoRoute => Rescue::Code(523),
            HTTPStatus(code) if (500..600).contains(code) => Rescue::Code(*code),
            _ => Rescue::Code(500),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(etype: ErrorType) -> Rescue {
        rescue(&Error::new_up(etype))
    }

    #[test]
    fn origin_failures_map_to_52x() {
        assert_eq!(upstream(ErrorType::ConnectRefused), Rescue::Code(521));
        assert_eq!(upstream(ErrorType::ConnectTimedout), Rescue::Code(522));
        assert_eq!(upstream(ErrorType::ConnectNoRoute), Rescue::Code(523));
        assert_eq!(upstream(ErrorType::ReadTimedout), Rescue::Code(524));
        assert_eq!(upstream(ErrorType::TLSHandshakeFailure), Rescue::Code(525));
        assert_eq!(upstream(ErrorType::InvalidCert), Rescue::Code(526));
        assert_eq!(upstream(ErrorType::ConnectionClosed), Rescue::Code(520));
        assert_eq!(upstream(ErrorType::InvalidHTTPHeader), Rescue::Code(520));
        assert_eq!(upstream(ErrorType::SocketError), Rescue::Code(502));
    }

    #[test]
    fn dns_failure_is_1016_whatever_the_source() {
        assert_eq!(rescue(&Error::new(ORIGIN_DNS_ERROR)), Rescue::Code(1016));
    }

    #[test]
    fn a_dead_client_gets_nothing() {
        let e = Error::new_down(ErrorType::WriteError);
        assert_eq!(rescue(&e), Rescue::ClientGone);
    }
}

#[cfg(test)]
mod catalog_coverage {
    use signpost_policy::codes;

    /// Every code the edge can raise, from the policy, the pipeline or the rescue table, has a
    /// catalog entry, so no answer falls back to the generic 500.
    #[test]
    fn every_code_the_edge_raises_is_in_the_catalog() {
        let policy = [
            codes::DNS_RESOLUTION_ERROR,
            codes::DIRECT_IP_ACCESS,
            codes::ASN_BANNED,
            codes::IP_BANNED,
            codes::COUNTRY_BANNED,
            codes::BROWSER_SIGNATURE_BANNED,
            codes::HOTLINKING_DENIED,
            codes::RATE_LIMITED,
            codes::FIREWALL_RULE_BLOCKED,
            codes::LEGAL_BLOCK,
        ];
        let edge = [1013, 1016, 500, 502, 520, 521, 522, 523, 524, 525, 526];
        for code in policy.into_iter().chain(edge) {
            assert!(
                signpost_problem::lookup(code).is_some(),
                "{code} is not in the catalog"
            );
        }
    }
}

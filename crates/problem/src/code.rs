//! `Code`: the error code an answer carries, the one type the policy's verdict, the edge's
//! rescue table and the catalog share.

use std::fmt;

/// A Cloudflare-compatible error code: `1xxx` for the edge's refusals, `5xx` for origin and edge
/// failures, and the HTTP-level codes of signpost's own entries. The catalog has one entry per
/// code ([`lookup`](crate::lookup)); the constants below are every code the edge raises, and a
/// test checks each is in the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Code(u16);

impl Code {
    /// The host is served by no zone.
    pub const DNS_RESOLUTION_ERROR: Code = Code(1001);
    /// The Host is an IP address literal that no zone lists.
    pub const DIRECT_IP_ACCESS: Code = Code(1003);
    /// The client's ASN is blocked.
    pub const ASN_BANNED: Code = Code(1005);
    /// The client's IP address is blocked.
    pub const IP_BANNED: Code = Code(1006);
    /// The client's country is blocked.
    pub const COUNTRY_BANNED: Code = Code(1009);
    /// The browser signature (User-Agent) is blocked.
    pub const BROWSER_SIGNATURE_BANNED: Code = Code(1010);
    /// Hotlinking of a protected resource.
    pub const HOTLINKING_DENIED: Code = Code(1011);
    /// Over TLS, the Host names another server than the handshake's SNI.
    pub const TLS_HOST_MISMATCH: Code = Code(1013);
    /// Rate limited (HTTP 429).
    pub const RATE_LIMITED: Code = Code(1015);
    /// The origin's host name does not resolve.
    pub const ORIGIN_DNS_ERROR: Code = Code(1016);
    /// Blocked by a custom (WAF) rule.
    pub const FIREWALL_RULE_BLOCKED: Code = Code(1020);
    /// Unavailable for legal reasons (HTTP 451).
    pub const LEGAL_BLOCK: Code = Code(1026);
    /// A challenge stands before the page (HTTP 403 with `cf-mitigated: challenge`): the answer
    /// to an agent, which cannot run the browsers' challenge page.
    pub const CHALLENGE_REQUIRED: Code = Code(403);
    /// signpost's own entry for a code the catalog does not have.
    pub const NOT_FOUND: Code = Code(404);
    /// A request the edge cannot parse: request line, headers or body.
    pub const BAD_REQUEST: Code = Code(400);
    /// A method the edge does not forward (CONNECT; TRACE and TRACK unless allowed).
    pub const METHOD_NOT_ALLOWED: Code = Code(405);
    /// The client missed the header or body deadline.
    pub const REQUEST_TIMEOUT: Code = Code(408);
    /// The request body is over the zone's limit.
    pub const PAYLOAD_TOO_LARGE: Code = Code(413);
    /// The request target is over the edge's limit.
    pub const URI_TOO_LONG: Code = Code(414);
    /// The header section is over the edge's limits.
    pub const HEADERS_TOO_LARGE: Code = Code(431);
    /// The edge's own internal error.
    pub const INTERNAL_ERROR: Code = Code(500);
    /// The origin failed in a way no narrower code names.
    pub const BAD_GATEWAY: Code = Code(502);
    /// The origin answered with nothing usable.
    pub const ORIGIN_UNKNOWN_ERROR: Code = Code(520);
    /// The origin refused the connection.
    pub const ORIGIN_DOWN: Code = Code(521);
    /// Connecting to the origin timed out.
    pub const CONNECTION_TIMED_OUT: Code = Code(522);
    /// The origin is unreachable (no route).
    pub const ORIGIN_UNREACHABLE: Code = Code(523);
    /// The origin accepted the request but did not answer in time.
    pub const ORIGIN_TIMEOUT: Code = Code(524);
    /// The TLS handshake with the origin failed.
    pub const ORIGIN_SSL_HANDSHAKE_FAILED: Code = Code(525);
    /// The origin's certificate is not valid.
    pub const ORIGIN_INVALID_CERT: Code = Code(526);

    /// The code with this number; whether the catalog has it is [`lookup`](crate::lookup)'s
    /// answer.
    pub const fn new(code: u16) -> Code {
        Code(code)
    }

    /// The number, e.g. `1015`.
    pub const fn get(self) -> u16 {
        self.0
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<Code> for u16 {
    fn from(code: Code) -> u16 {
        code.0
    }
}

impl PartialEq<u16> for Code {
    fn eq(&self, other: &u16) -> bool {
        self.0 == *other
    }
}
